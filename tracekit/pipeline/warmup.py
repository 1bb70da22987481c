"""Compile every kernel ahead of time: `python -m tracekit.pipeline.warmup [--into-package] SAMPLE...`.

The compiled machine code is cached on disk (tracekit.core.jit.cache_dir),
so a new machine's first capture does not pay for compiling; `make setup`
runs this on the sample captures. With `--into-package` the cache is
written into the installed package (tracekit/_kernels/kernels-<hash of the
kernels' sources>), where every user of that install finds it: a changed
source has another hash, so it compiles afresh instead of loading stale code.
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

from ..core.jit import PACKAGE_CACHE, cache_dir
from ..store.db import connect
from .analyze import analyze
from .captures import load_captures


def warm_up(paths, into_package=False):
    """Ingest and analyse `paths` (small sample captures) in a temporary store
    with compiled kernels; return the cache folder."""
    os.environ["TRACEKIT_JIT"] = "always"
    if into_package:
        folder = Path(__file__).resolve().parents[1] / PACKAGE_CACHE
        name = Path(cache_dir()).name
        for old in folder.glob("kernels-*"):  # compiled from other sources
            if old.name != name:
                shutil.rmtree(old)
        os.makedirs(folder / name, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        con = connect(os.path.join(tmp, "warm.duckdb"))
        try:
            load_captures(con, paths)
            analyze(con)
        finally:
            con.close()
    return cache_dir()


if __name__ == "__main__":
    args = sys.argv[1:]
    into = "--into-package" in args
    print(f"kernels compiled into {warm_up([a for a in args if a != '--into-package'], into)}")
