"""tracekit against tcptrace and tshark on one capture, whole processes, alternated.

    python benchmarks/compare.py benchmarks/data/kernel-tcp-mix-128.pcap --rounds 3
    python benchmarks/compare.py benchmarks/data/mix-200k.pcap --tshark --rounds 3
    python benchmarks/compare.py benchmarks/data/mix-200k.pcap --tshark --ingest-only --before /tmp/base

Tools and their flags (each a whole process on the same file in the page cache):

- `tracekit ingest FILE --db NEW` (decode and store every packet and flow);
- `tracekit analyze --db DB` on a copy of a store holding only that ingest
  (every derived table: Wireshark's sequence analysis and tracekit's own,
  retransmissions, RTT, stalls, handshakes, requests, bounds, attribution);
- `tracekit ingest` then `tracekit analyze` (end to end: two processes, times
  added, memory the larger);
- `tcptrace -l -r FILE` (long per-connection statistics with RTT: it reads,
  reconstructs every connection and reports; the closest peer to both steps);
- with `--tshark`: `tshark -T fields` of the header fields tracekit stores
  (TCP reassembly off), the peer of ingest, and `tshark -T fields` of the
  `tcp.analysis` fields, the peer of the sequence analysis.

With `--before TREE` (another source tree of tracekit, e.g. `git archive` of
main unpacked in /tmp), its ingest, analyze and ingest + analyze run in the
same alternated rounds, marked "(before)": a change's effect and both trees'
ratios to tcptrace come from one run on one machine's load. `--ingest-only`
runs tracekit's ingest alone (and with `--tshark`, only tshark's header
fields): the slice's comparison in a fraction of the time.

Each tracekit runs as `python -P -m tracekit.cli` with its tree first on the
path (see common.tracekit_command), never the installed entry point.

Prints one Markdown table: median seconds and peak memory per tool, packets/s,
each tracekit step's time against tcptrace's (and tshark's), the size of the
store analyze leaves, with the machine's load before and after.
"""

import argparse
import os
import shutil
import sys
import tempfile

from common import (ROOT, alternate, compile_kernels, count_packets, load, medians,
                    run_cpu as run, tracekit_command, warm)

TSHARK_FIELDS = [
    "frame.number", "frame.time_epoch", "frame.len", "frame.cap_len", "ip.src", "ip.dst",
    "ipv6.src", "ipv6.dst", "ip.proto", "ip.ttl", "tcp.srcport", "tcp.dstport", "udp.srcport",
    "udp.dstport", "tcp.seq_raw", "tcp.ack_raw", "tcp.flags", "tcp.window_size_value",
    "tcp.len", "tcp.options.mss_val", "tcp.options.wscale.shift", "tcp.options.sack_le",
    "tcp.options.sack_re", "tcp.options.timestamp.tsval", "tcp.options.timestamp.tsecr",
]
TSHARK_ANALYSIS = ["frame.number", "tcp.analysis.bytes_in_flight", "tcp.analysis.ack_rtt",
                   "tcp.analysis.retransmission", "tcp.analysis.fast_retransmission",
                   "tcp.analysis.duplicate_ack", "tcp.analysis.lost_segment",
                   "tcp.analysis.out_of_order", "tcp.analysis.window_full"]


def tracekit_tools(tmp, capture, tree, mark="", ingest_only=False):
    """{name: run()} for one tree's ingest, analyze and both (`ingest_only`:
    ingest alone); sizes[name] gets the store analyze left (MB)."""
    cmd, env = tracekit_command(tree)
    ingested = os.path.join(tmp, f"ingested{mark}.duckdb")
    db, e2e_db = os.path.join(tmp, f"bench{mark}.duckdb"), os.path.join(tmp, f"e2e{mark}.duckdb")
    if not ingest_only:
        run([*cmd, "ingest", capture, "--db", ingested], env)  # untimed: for analyze
    sizes = {}

    def fresh(path):
        for suffix in ("", ".wal"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)

    def ingest():
        fresh(db)
        return run([*cmd, "ingest", capture, "--db", db], env)

    def analyze():
        fresh(db)
        shutil.copy(ingested, db)
        out = run([*cmd, "analyze", "--db", db], env)
        sizes[f"tracekit analyze{mark}"] = os.path.getsize(db) / 1e6
        return out

    def end_to_end():
        fresh(e2e_db)
        s1, m1, c1 = run([*cmd, "ingest", capture, "--db", e2e_db], env)
        s2, m2, c2 = run([*cmd, "analyze", "--db", e2e_db], env)
        return s1 + s2, max(m1, m2), c1 + c2

    tools = {f"tracekit ingest{mark}": ingest}
    if not ingest_only:
        tools.update({f"tracekit analyze{mark}": analyze,
                      f"tracekit ingest + analyze{mark}": end_to_end})
    return tools, sizes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tshark", action="store_true", help="also run tshark (slow: ~15 s per 1e6)")
    ap.add_argument("--before", metavar="TREE", help="another tracekit source tree to compare")
    ap.add_argument("--ingest-only", action="store_true",
                    help="tracekit's ingest alone (no analyze): the peer of tshark's header fields")
    args = ap.parse_args()
    capture = os.path.abspath(args.capture)
    compile_kernels()
    if args.before:
        compile_kernels(os.path.abspath(args.before))
    packets = count_packets(capture)
    warm(capture)
    load_before = load()
    with tempfile.TemporaryDirectory() as tmp:
        tools, sizes = tracekit_tools(tmp, capture, ROOT, ingest_only=args.ingest_only)
        sizes = [sizes]  # (filled as the rounds run)
        if args.before:
            more, more_sizes = tracekit_tools(tmp, capture, os.path.abspath(args.before),
                                              " (before)", args.ingest_only)
            tools.update(more)
            sizes.append(more_sizes)
        tools["tcptrace -l -r"] = lambda: run(["tcptrace", "-l", "-r", capture])
        if args.tshark:
            f = [a for x in TSHARK_FIELDS for a in ("-e", x)]
            tools["tshark -T fields (headers)"] = lambda: run(
                ["tshark", "-n", "-r", capture, "-o", "tcp.desegment_tcp_streams:FALSE",
                 "-T", "fields", *f])
            a = [x for y in TSHARK_ANALYSIS for x in ("-e", y)]
            tools["tshark -T fields (tcp.analysis)"] = lambda: run(
                ["tshark", "-n", "-r", capture, "-o", "tcp.desegment_tcp_streams:FALSE",
                 "-T", "fields", *a, "-Y", "tcp"])
        if args.tshark and args.ingest_only:
            del tools["tshark -T fields (tcp.analysis)"]
        results = {k: medians(v) for k, v in alternate(tools, args.rounds).items()}
    load_after = load()
    size = os.path.getsize(capture) / 1e6
    print(f"\n`{os.path.basename(capture)}`: {packets:,} packets, {size:,.0f} MB; "
          f"median of {args.rounds} alternated rounds; load {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after, {load_before[1]} cores\n")
    base = results["tcptrace -l -r"][0]
    shark = {"tracekit ingest": "tshark -T fields (headers)",
             "tracekit ingest (before)": "tshark -T fields (headers)",
             "tracekit analyze": "tshark -T fields (tcp.analysis)",
             "tracekit analyze (before)": "tshark -T fields (tcp.analysis)"}
    stores = {k: v for d in sizes for k, v in d.items()}
    cpu_base = results["tcptrace -l -r"][2]
    print("| tool | seconds | packets/s | peak memory | / tcptrace | tshark / it | CPU s | "
          "CPU / tcptrace's | tshark's CPU / its | store |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, (sec, mb, cpu) in results.items():
        peer = results.get(shark.get(name, ""))
        ratio = f"{peer[0] / sec:.1f}" if peer else ""
        cpu_ratio = f"{peer[2] / cpu:.1f}" if peer else ""
        store = f"{stores[name]:,.0f} MB" if name in stores else ""
        print(f"| {name} | {sec:.2f} | {packets / sec:,.0f} | {mb:,.0f} MB | "
              f"{sec / base:.2f} | {ratio} | {cpu:.2f} | {cpu / cpu_base:.2f} | {cpu_ratio} | "
              f"{store} |")


if __name__ == "__main__":
    main()
