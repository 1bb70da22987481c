"""Time `tracekit ingest` against tshark and tcptrace on the same capture.

Each tool runs as its own process on the same file (already in the page
cache: one untimed warm-up read first), wall-clock time and peak resident
memory of the whole process are measured, and packets/s and ratios printed:

    python benchmarks/ingest.py benchmarks/data/kernel-tcp-128.pcap [--runs 3]
    python benchmarks/ingest.py --make   # make the 2M-packet capture first (root)

tshark prints the same header fields tracekit stores (frame, time, addresses,
ports, seq/ack, flags, window, lengths, TCP options), with TCP reassembly off
(`-o tcp.desegment_tcp_streams:FALSE`; on full-snaplen files it is otherwise
13x slower). tcptrace runs `-l` (long per-connection statistics). The
figures in the README come from this script.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "data", "kernel-tcp-128.pcap")

TSHARK_FIELDS = [
    "frame.number", "frame.time_epoch", "frame.len", "frame.cap_len", "ip.src", "ip.dst",
    "ipv6.src", "ipv6.dst", "ip.proto", "ip.ttl", "tcp.srcport", "tcp.dstport", "udp.srcport",
    "udp.dstport", "tcp.seq_raw", "tcp.ack_raw", "tcp.flags", "tcp.window_size_value",
    "tcp.len", "tcp.options.mss_val", "tcp.options.wscale.shift", "tcp.options.sack_le",
    "tcp.options.sack_re", "tcp.options.timestamp.tsval", "tcp.options.timestamp.tsecr",
]


def run(cmd, **kw):
    """Run a command; return (seconds, peak RSS in MB) of that process."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{cmd[0]} failed:\n{err}")
    return seconds, usage.ru_maxrss / 1024


def count_packets(path):
    out = subprocess.run(["capinfos", "-c", "-M", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "Number of packets" in line:
            return int(line.split(":")[1].strip())
    raise SystemExit(f"capinfos could not count {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", nargs="?", default=DEFAULT)
    ap.add_argument("--runs", type=int, default=3, help="runs per tool (best is reported)")
    ap.add_argument("--make", action="store_true", help="make the default capture if missing")
    ap.add_argument("--skip", action="append", default=[], choices=["tshark", "tcptrace"])
    args = ap.parse_args()
    if not os.path.exists(args.capture):
        if not args.make:
            sys.exit(f"{args.capture} does not exist; run with --make (needs root) or "
                     f"python benchmarks/make_capture.py")
        subprocess.run([sys.executable, os.path.join(HERE, "make_capture.py"),
                        "--out", os.path.dirname(args.capture), "--snaplen", "128"], check=True)
    packets = count_packets(args.capture)
    size_mb = os.path.getsize(args.capture) / 1e6
    with open(args.capture, "rb") as f:  # warm the page cache
        while f.read(64 << 20):
            pass
    tracekit = [shutil.which("tracekit") or sys.exit("tracekit is not installed")]
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "bench.duckdb")

        def tk():
            if os.path.exists(db):
                os.remove(db)
            return run(tracekit + ["ingest", args.capture, "--db", db])

        tools = {"tracekit ingest": tk}
        if "tshark" not in args.skip and shutil.which("tshark"):
            fields = [a for f in TSHARK_FIELDS for a in ("-e", f)]
            tools["tshark -T fields"] = lambda: run(
                ["tshark", "-n", "-r", args.capture, "-o", "tcp.desegment_tcp_streams:FALSE",
                 "-T", "fields", *fields])
        if "tcptrace" not in args.skip and shutil.which("tcptrace"):
            tools["tcptrace -l"] = lambda: run(["tcptrace", "-l", args.capture])
        results = time_tools(tools, args.runs)
    report(results, "tracekit ingest", packets,
           f"{os.path.basename(args.capture)}: {packets:,} packets, {size_mb:,.0f} MB "
           f"(whole process, file in page cache, best of {args.runs} except tshark: 1 run)")


def time_tools(tools, runs):
    """{name: (best seconds, its peak MB)}; tshark runs once (it is the slowest)."""
    results = {}
    for name, fn in tools.items():
        n = 1 if name.startswith("tshark") else runs
        best = min((fn() for _ in range(n)), key=lambda r: r[0])
        results[name] = best
        print(f"{name}: {best[0]:.2f} s, {best[1]:.0f} MB", file=sys.stderr)
    return results


def report(results, base, packets, title):
    """The Markdown table the README quotes."""
    base_s = results[base][0]
    print(f"\n{title}\n")
    print("| tool | seconds | packets/s | its time / tracekit's | peak memory |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, (sec, mb) in results.items():
        print(f"| {name} | {sec:.2f} | {packets / sec:,.0f} | {sec / base_s:.2f} | {mb:,.0f} MB |")

if __name__ == "__main__":
    main()
