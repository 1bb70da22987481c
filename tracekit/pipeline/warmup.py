"""Compile every kernel ahead of time: `python -m tracekit.pipeline.warmup [--into-package] SAMPLE...`.

The compiled machine code is cached on disk (tracekit.core.jit.cache_dir),
so a new machine's first capture does not pay for compiling; `make setup`
runs this on the sample captures. It also compiles ingest's and analyze's
kernels ahead of time into extension modules (core/aot.py), under the
signatures the sample's ingest and analyze called them with: a compiled
ingest or analyze then never imports numba. With `--into-package` the cache is
written into the installed package (tracekit/_kernels/kernels-<hash of the
kernels' sources>), where every user of that install finds it: a changed
source has another hash, so it compiles afresh instead of loading stale code.
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

from ..core.aot import build, missing
from ..core import jit
from ..core.jit import PACKAGE_CACHE, cache_dir
from ..kernels import segments, wireshark
from ..readers.preload import INGEST_KERNELS, load_kernels
from ..store.db import connect
from .analyze import analyze
from .captures import load_captures
from .steps import bottleneck, phases, stalls, stalls_held

# what analyze runs compiled (each under the one signature its step calls it with)
ANALYZE_KERNELS = (wireshark.analyze, segments.classify, segments.flush_flights,
                   bottleneck.candidate_pairs, stalls.limitation_runs, stalls.finish_flows,
                   phases.pause_inputs, phases.state_overlaps, phases.overlap_pairs,
                   phases.download_gaps, stalls_held.held_segments)


def warm_up(paths, into_package=False):
    """Ingest and analyse `paths` (small sample captures) in a temporary store
    with compiled kernels; return the cache folder."""
    os.environ["TRACEKIT_JIT"] = "always"
    jit._aot_enabled = False  # compiled through numba here, even when modules of them exist
    if into_package:
        folder = Path(__file__).resolve().parents[1] / PACKAGE_CACHE
        name = Path(cache_dir()).name
        for old in folder.glob("kernels-*"):  # compiled from other sources
            if old.name != name:
                shutil.rmtree(old)
        os.makedirs(folder / name, exist_ok=True)
    compile_ahead(paths)  # ingest's kernels, ahead of time (core/aot.py)
    with tempfile.TemporaryDirectory() as tmp:
        con = connect(os.path.join(tmp, "warm.duckdb"))
        try:
            load_captures(con, paths)
            analyze(con)
        finally:
            con.close()
    # (those the analyze just run compiled: a kernel the samples never reach stays numba's)
    _build([k for k in missing(ANALYZE_KERNELS) if k.signatures()], "analyze")
    return cache_dir()


def compile_ahead(paths):
    """Ingest's kernels compiled ahead of time beside the cache (core/aot.py):
    a compiled ingest then imports no numba. Without a C compiler (or numba's
    ahead-of-time compiler) a note says so and ingest loads them through numba."""
    wanted = missing(INGEST_KERNELS)  # (built once for these sources)
    if not wanted:
        return []
    load_kernels(paths)  # (each under the signature ingest calls it with)
    return _build(wanted, "ingest")


def _build(kernels, who):
    """Build `kernels` ahead of time; without a C compiler (or numba's
    ahead-of-time compiler) a note says so and `who` loads them through numba."""
    if not kernels:
        return []
    try:
        return build(kernels)
    except Exception as e:  # noqa: BLE001 -- any failure leaves numba's cache, which works
        print(f"note: {who}'s kernels not compiled ahead ({type(e).__name__}: {e}); "
              f"{who} loads them through numba", file=sys.stderr)
        return None


if __name__ == "__main__":
    args = sys.argv[1:]
    into = "--into-package" in args
    print(f"kernels compiled into {warm_up([a for a in args if a != '--into-package'], into)}")
