"""Many captures on Dask: one worker against two, and against the single process.

    python benchmarks/cluster.py [--captures 40] [--packets 100000] [--rounds 3]

The captures are the mixed workload (make_capture.py, 128-byte snaplen,
tiled three times by tile_capture.py) cut into pieces of 100 k packets
(editcap -c): 40 distinct captures of real kernel TCP, flows cut where a
piece ends. Each round runs, as whole processes, alternated:

- `tracekit ingest FILES --store DIR/ --workers 1` (ingest and analyse on a
  LocalCluster of one worker process, then the store-wide steps);
- the same with `--workers 2`;
- the single-process path: `tracekit ingest FILES --db X` then
  `tracekit analyze --db X` (two processes, their times added).

The table gives medians, the speed-up of two workers over one (the goal is
1.8x on this 2-core machine), each path's cost per capture and per packet,
and the peak resident memory of the largest process (a worker, or the
coordinator), with the machine's load before and after.
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile

from common import compile_kernels, load, medians, run, tracekit_command

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=os.path.join(HERE, "data", "kernel-tcp-mix-128-x3.pcap"))
    ap.add_argument("--captures", type=int, default=40)
    ap.add_argument("--packets", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not os.path.exists(args.source):
        sys.exit(f"{args.source} is missing: make it with make_capture.py and tile_capture.py")
    compile_kernels()
    tk, env = tracekit_command()  # this tree's tracekit, not the installed one
    with tempfile.TemporaryDirectory(dir=os.path.join(HERE, "data")) as tmp:
        head = os.path.join(tmp, "head.pcap")
        subprocess.run(["editcap", "-r", args.source, head, f"1-{args.captures * args.packets}"],
                       check=True, capture_output=True)
        subprocess.run(["editcap", "-c", str(args.packets), head, os.path.join(tmp, "c.pcap")],
                       check=True, capture_output=True)
        os.remove(head)
        files = sorted(glob.glob(os.path.join(tmp, "c_*.pcap")))[:args.captures]

        def on_dask(workers):
            def go():
                out = os.path.join(tmp, f"ds{workers}")
                shutil.rmtree(out, ignore_errors=True)
                return run([*tk, "ingest", *files, "--store", out + "/",
                            "--workers", str(workers)], env)
            return go

        def single():
            db = os.path.join(tmp, "single.duckdb")
            for f in (db, db + ".wal"):
                if os.path.exists(f):
                    os.remove(f)
            s1, m1 = run([*tk, "ingest", *files, "--db", db], env)
            s2, m2 = run([*tk, "analyze", "--db", db], env)
            return s1 + s2, max(m1, m2)

        tools = {"dask, 1 worker": on_dask(1), "dask, 2 workers": on_dask(2),
                 "single process": single}
        before = load()[0]
        results = {name: [] for name in tools}
        names = list(tools)
        for r in range(args.rounds):
            for name in (names if r % 2 == 0 else names[::-1]):
                seconds, mb = tools[name]()
                results[name].append((seconds, mb))
                print(f"round {r + 1}: {name}: {seconds:.2f} s, {mb:,.0f} MB", file=sys.stderr)
        after = load()[0]
    n = len(files)
    packets = n * args.packets
    print(f"\n{n} captures of {args.packets:,} packets ({packets:,}); ingest and analyse, "
          f"whole processes, median of {args.rounds} alternated rounds; load {before:.2f} "
          f"before, {after:.2f} after, {os.cpu_count()} cores\n")
    print("| path | seconds | per capture | per packet | peak memory (largest process) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, samples in results.items():
        sec, mb = medians(samples)
        print(f"| {name} | {sec:.1f} | {sec / n * 1000:,.0f} ms | {sec / packets * 1e6:.1f} us | "
              f"{mb:,.0f} MB |")
    one, two = medians(results["dask, 1 worker"])[0], medians(results["dask, 2 workers"])[0]
    print(f"\ntwo workers over one: {one / two:.2f}x (goal 1.8x)")


if __name__ == "__main__":
    main()
