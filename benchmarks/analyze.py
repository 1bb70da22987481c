"""Time `tracekit analyze` against `tcptrace -l` (and tshark's TCP analysis) on one capture.

tcptrace -l reads a capture and reconstructs every connection's sequence
space, RTT samples, retransmissions and windows: the closest anchor to
tracekit's transport analyses. The capture is ingested first (untimed, the
ingest benchmark times that); then `tracekit analyze` builds every derived
table (tcp_analysis with Wireshark's and tracekit's verdicts, TLS messages,
retransmissions, recovery rounds, RTT samples and summary, ACK gaps, in
flight, flights, stalls, handshakes) and each tool runs as its own process
on the same file in the page cache. tshark runs its sequence analysis with
the fields of the agreement test (one run: it is the slowest).

    python benchmarks/analyze.py benchmarks/data/kernel-tcp-128.pcap [--runs 3]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from ingest import DEFAULT, count_packets, report, run, time_tools

TSHARK_ANALYSIS = ["frame.number", "tcp.analysis.bytes_in_flight", "tcp.analysis.ack_rtt",
                   "tcp.analysis.retransmission", "tcp.analysis.fast_retransmission",
                   "tcp.analysis.duplicate_ack", "tcp.analysis.lost_segment",
                   "tcp.analysis.out_of_order", "tcp.analysis.window_full"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", nargs="?", default=DEFAULT)
    ap.add_argument("--runs", type=int, default=3, help="runs per tool (best is reported)")
    ap.add_argument("--skip", action="append", default=[], choices=["tshark", "tcptrace"])
    args = ap.parse_args()
    if not os.path.exists(args.capture):
        sys.exit(f"{args.capture} does not exist; make it with benchmarks/make_capture.py")
    packets = count_packets(args.capture)
    tracekit = [shutil.which("tracekit") or sys.exit("tracekit is not installed")]
    with open(args.capture, "rb") as f:
        while f.read(64 << 20):
            pass
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "bench.duckdb")
        subprocess.run(tracekit + ["ingest", args.capture, "--db", db], check=True,
                       stdout=subprocess.DEVNULL)
        clean = os.path.join(tmp, "clean.duckdb")
        shutil.copy(db, clean)

        def tk():
            shutil.copy(clean, db)
            return run(tracekit + ["analyze", "--db", db])

        tools = {"tracekit analyze": tk}
        if "tcptrace" not in args.skip and shutil.which("tcptrace"):
            tools["tcptrace -l"] = lambda: run(["tcptrace", "-l", args.capture])
        if "tshark" not in args.skip and shutil.which("tshark"):
            fields = [a for f in TSHARK_ANALYSIS for a in ("-e", f)]
            tools["tshark tcp.analysis"] = lambda: run(
                ["tshark", "-n", "-r", args.capture, "-o", "tcp.desegment_tcp_streams:FALSE",
                 "-T", "fields", *fields, "-Y", "tcp"])
        results = time_tools(tools, args.runs)
    report(results, "tracekit analyze", packets,
           f"{os.path.basename(args.capture)}: {packets:,} packets (whole process, file in "
           f"page cache, best of {args.runs} except tshark: 1 run)")

if __name__ == "__main__":
    main()
