"""How tracekit's time and memory grow with the capture: 0.5, 1, 2, 8.6 and 29 M packets.

    python benchmarks/scaling.py [--base benchmarks/data/kernel-tcp-mix-128.pcap]

The inputs are cut from and tiled out of the mixed workload's 128-byte
capture (make_capture.py): its first 0.5 M, 1 M and 2 M packets (editcap),
the whole (2.9 M), and 3 and 10 copies of it one after another with their
own hosts (tile_capture.py: 8.6 M, 29 M). For each, one run of: `tracekit
ingest` into a new store, `tracekit analyze` on it, and `tcptrace -l -r`;
seconds, CPU seconds (user + system) and peak memory of each whole process,
and CPU ns per packet so that linear growth reads as a constant column (the
CPU time, not the wall time: on a shared machine the wall time grows with
whatever else runs, the CPU time with the work).
"""

import argparse
import os
import subprocess
import sys
import tempfile

from common import compile_kernels, count_packets, load, run_cpu, tracekit_command, warm

HERE = os.path.dirname(os.path.abspath(__file__))


def inputs(base):
    data = os.path.dirname(base)
    stem = os.path.splitext(base)[0]
    out = []
    for n in (500_000, 1_000_000, 2_000_000):
        path = f"{stem}-first{n // 1000}k.pcap"
        if not os.path.exists(path):
            subprocess.run(["editcap", "-F", "pcap", "-r", base, path, f"1-{n}"], check=True)
        out.append(path)
    out.append(base)
    for copies in (3, 10):
        path = os.path.join(data, f"{os.path.basename(stem)}-x{copies}.pcap")
        if not os.path.exists(path):
            subprocess.run([sys.executable, os.path.join(HERE, "tile_capture.py"), base,
                            str(copies), path], check=True)
        out.append(path)
    return out


def attempt(cmd, env=None):
    """run_cpu(), but a failure is a row of the table (its first line), not the end."""
    try:
        return run_cpu(cmd, env)
    except SystemExit as e:
        lines = str(e).splitlines()
        return None, (lines[1] if len(lines) > 1 else lines[0])[:120], None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=os.path.join(HERE, "data", "kernel-tcp-mix-128.pcap"))
    ap.add_argument("--max", type=int, default=None, help="skip inputs above this many packets")
    args = ap.parse_args()
    compile_kernels()
    tk, env = tracekit_command()  # this tree's tracekit, not the installed one
    rows = []
    for path in inputs(args.base):
        packets = count_packets(path)
        if args.max and packets > args.max:
            continue
        warm(path)
        before = load()[0]
        with tempfile.TemporaryDirectory() as tmp:
            db = os.path.join(tmp, "s.duckdb")
            ingest = attempt([*tk, "ingest", path, "--db", db], env)
            analyze = attempt([*tk, "analyze", "--db", db], env)
        tcptrace = run_cpu(["tcptrace", "-l", "-r", path])
        rows.append((packets, ingest, analyze, tcptrace, before, load()[0]))
        print(f"{packets:,}: ingest {ingest}, analyze {analyze}, tcptrace {tcptrace}",
              file=sys.stderr)
    print(f"\nOne run each; {os.cpu_count()} cores; load (1 min) before and after each input.\n")
    print("| packets | ingest s (CPU s) | CPU ns/packet | peak MB | analyze s (CPU s) | "
          "CPU ns/packet | peak MB | tcptrace -l -r s (CPU s) | peak MB | analyze / tcptrace, "
          "CPU | load |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for packets, ingest, analyze, (t_s, t_mb, t_cpu), l0, l1 in rows:
        cells = []
        for secs, mb, cpu in (ingest, analyze):
            cells += ([f"{secs:.1f} ({cpu:.1f})", f"{cpu / packets * 1e9:,.0f}", f"{mb:,.0f}"]
                      if secs is not None else [f"failed: {mb}", "", ""])
        ratio = f"{analyze[2] / t_cpu:.1f}" if analyze[0] is not None else ""
        print(f"| {packets:,} | {' | '.join(cells)} | {t_s:.1f} ({t_cpu:.1f}) | {t_mb:,.0f} | "
              f"{ratio} | {l0:.1f} / {l1:.1f} |")


if __name__ == "__main__":
    main()
