"""Two versions of tracekit on the same input: ingest and analyze, alternated.

    python benchmarks/ab.py OLD_SOURCE_DIR NEW_SOURCE_DIR CAPTURE_OR_MANIFEST [--rounds 3]

Each version is a source tree (a git worktree: `git worktree add /tmp/old
main`), run as whole processes with PYTHONPATH pointing at it, so a change
that must not cost speed is measured against what it changes. The input is a
capture, or a manifest (`*.runs.json`, many small captures). Per round and
version: `tracekit ingest` into a new store, then `tracekit analyze` of a
fresh copy of a store that version ingested (untimed), each a process of its
own; rounds alternate the versions and reverse their order every other round.
Both versions compile their kernels first (untimed: the cache is per version
of the sources). Prints the medians, peak memory, the ratio new/old and the
machine's load before and after.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from common import alternate, load, medians, run


def tracekit(source, *args):
    # -P: the working directory is not on sys.path (run from inside a source
    # tree, `-m` would import that tree's tracekit whatever PYTHONPATH says)
    return [sys.executable, "-P", "-m", "tracekit.cli", *args], {"PYTHONPATH": source}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("input")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    sources = {"old": os.path.abspath(a.old), "new": os.path.abspath(a.new)}
    what = (["--manifest", os.path.abspath(a.input)] if a.input.endswith(".json")
            else [os.path.abspath(a.input)])
    samples = [os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "captures", n) for n in ("lossy-download-server.pcap",
                                                     "udp-echo.pcapng")]
    work = tempfile.mkdtemp(prefix="tracekit-ab-")
    try:
        for name, src in sources.items():  # each version's kernels, and its ingested store
            subprocess.run([sys.executable, "-P", "-m", "tracekit.pipeline.warmup", *samples],
                           env={**os.environ, "PYTHONPATH": src}, check=True,
                           stdout=subprocess.DEVNULL)
            cmd, env = tracekit(src, "ingest", *what, "--db", f"{work}/{name}-base.duckdb")
            run(cmd, env)
        before_load = load()

        def ingest(name):
            def go():
                target = f"{work}/{name}-ingest.duckdb"
                for f in (target, target + ".wal"):
                    if os.path.exists(f):
                        os.remove(f)
                cmd, env = tracekit(sources[name], "ingest", *what, "--db", target)
                return run(cmd, env)
            return go

        def analyze(name):
            def go():
                shutil.copy(f"{work}/{name}-base.duckdb", f"{work}/{name}-analyze.duckdb")
                cmd, env = tracekit(sources[name], "analyze", "--db",
                                    f"{work}/{name}-analyze.duckdb")
                return run(cmd, env)
            return go

        tools = {f"{step} {name}": fn(name) for step, fn in (("ingest", ingest),
                                                              ("analyze", analyze))
                 for name in sources}
        results = alternate(tools, a.rounds)
        after_load = load()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"| step | old s | new s | new / old | old peak MB | new peak MB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for step in ("ingest", "analyze"):
        (os_, om), (ns, nm) = medians(results[f"{step} old"]), medians(results[f"{step} new"])
        print(f"| {step} | {os_:.2f} | {ns:.2f} | {ns / os_:.3f} | {om:,.0f} | {nm:,.0f} |")
    print(f"\n{a.rounds} alternated rounds; load {before_load[0]:.2f} before and "
          f"{after_load[0]:.2f} after on {before_load[1]} cores")


if __name__ == "__main__":
    main()
