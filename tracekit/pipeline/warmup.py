"""Compile every kernel ahead of time: `python -m tracekit.pipeline.warmup SAMPLE...`.

The compiled machine code is cached on disk (tracekit.core.jit.cache_dir),
so a new machine's first capture does not pay for compiling; `make setup`
runs this on the sample captures.
"""

import os
import sys
import tempfile

from ..core.jit import cache_dir
from ..store.db import connect
from .analyze import analyze
from .captures import load_captures


def warm_up(paths):
    """Ingest and analyse `paths` (small sample captures) in a temporary store
    with compiled kernels; return the cache folder."""
    os.environ["TRACEKIT_JIT"] = "always"
    with tempfile.TemporaryDirectory() as tmp:
        con = connect(os.path.join(tmp, "warm.duckdb"))
        try:
            load_captures(con, paths)
            analyze(con)
        finally:
            con.close()
    return cache_dir()


if __name__ == "__main__":
    print(f"kernels compiled into {warm_up(sys.argv[1:])}")
