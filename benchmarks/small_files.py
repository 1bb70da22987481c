"""Many small captures in one command: files per second of `tracekit ingest`.

    python benchmarks/small_files.py [--files 1000] [--rounds 3]

The files are the mixed workload's 200 k-packet slice cut into pieces of 200
packets each (editcap -c 200): 1,000 distinct captures of ~30 kB. Each round
ingests all of them into a new store, whole process; the table gives the
median, files/s and packets/s, and the machine's load.
"""

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile

from common import compile_kernels, load, run, tracekit_command

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=os.path.join(HERE, "data", "mix-200k.pcap"))
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not os.path.isfile(args.source):
        sys.exit(f"{args.source}: no such capture; make it as docs/benchmarks.md says "
                 f"(editcap -r benchmarks/data/kernel-tcp-mix-128.pcap ... 1-200000) "
                 f"or give --source")
    compile_kernels()
    tk, env = tracekit_command()  # this tree's tracekit, not the installed one
    with tempfile.TemporaryDirectory() as tmp:
        per = max(1, 200_000 // args.files)
        subprocess.run(["editcap", "-c", str(per), args.source, os.path.join(tmp, "s.pcap")],
                       check=True, capture_output=True)
        files = sorted(glob.glob(os.path.join(tmp, "s_*.pcap")))[:args.files]
        before = load()[0]
        times = []
        for r in range(args.rounds):
            db = os.path.join(tmp, f"r{r}.duckdb")
            seconds, mb = run([*tk, "ingest", *files, "--db", db], env)
            times.append((seconds, mb))
            print(f"round {r + 1}: {seconds:.2f} s, {mb:,.0f} MB", file=sys.stderr)
        after = load()[0]
    sec = statistics.median(t for t, _ in times)
    mb = statistics.median(m for _, m in times)
    print(f"\n{len(files):,} captures of {per} packets; median of {args.rounds} rounds; load "
          f"{before:.2f} before, {after:.2f} after, {os.cpu_count()} cores\n")
    print("| tool | seconds | files/s | packets/s | peak memory |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(f"| tracekit ingest | {sec:.2f} | {len(files) / sec:,.0f} | "
          f"{len(files) * per / sec:,.0f} | {mb:,.0f} MB |")


if __name__ == "__main__":
    main()
