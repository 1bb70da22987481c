"""Packet-by-packet agreement of tracekit's Wireshark-compatible view with
tshark on any number of captures: the scan behind docs/fidelity.md's table
of third-party test-suite captures.

    python tools/wireshark_agreement.py STORE.duckdb CAPTURE... [--ingest]

With --ingest, each capture is ingested into STORE on its own (one that
tracekit refuses is listed and left out) and the store analysed; then every
TCP packet tshark shows is compared field by field with `tcp_analysis.ws_*`.
Prints per field the packets agreeing, then the captures with the most
disagreements and a few examples (file, frame, tshark's value, tracekit's).
Needs tshark on PATH.
"""

import argparse
import collections
import os
import subprocess

import tracekit
from tracekit.core.errors import TracekitError

FIELDS = {  # tshark field -> tcp_analysis column
    "tcp.analysis.retransmission": "ws_retransmission",
    "tcp.analysis.fast_retransmission": "ws_fast_retransmission",
    "tcp.analysis.spurious_retransmission": "ws_spurious_retransmission",
    "tcp.analysis.out_of_order": "ws_out_of_order",
    "tcp.analysis.lost_segment": "ws_lost_segment",
    "tcp.analysis.ack_lost_segment": "ws_ack_lost_segment",
    "tcp.analysis.duplicate_ack": "ws_duplicate_ack",
    "tcp.analysis.keep_alive": "ws_keep_alive",
    "tcp.analysis.zero_window": "ws_zero_window",
    "tcp.analysis.window_full": "ws_window_full",
    "tcp.analysis.bytes_in_flight": "ws_bytes_in_flight",
}


def ingest(store, paths):
    for path in paths:
        try:
            store.ingest([path])
        except TracekitError as e:
            print(f"refused: {e}")
    store.analyze()


def tshark_rows(path):
    args = ["tshark", "-r", path, "-Y", "tcp", "-T", "fields", "-e", "frame.number"]
    for field in FIELDS:
        args += ["-e", field]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600).stdout
    return {r[0]: r[1:] for r in (ln.split("\t") for ln in out.splitlines()) if r and r[0]}


def agrees(column, theirs, mine):
    if column == "ws_bytes_in_flight":
        return (theirs == "") == (mine is None) and (theirs == "" or int(theirs) == mine)
    return (theirs != "") == bool(mine)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("captures", nargs="+")
    ap.add_argument("--ingest", action="store_true")
    a = ap.parse_args()
    agree, total = collections.Counter(), collections.Counter()
    per_file, examples = collections.Counter(), collections.defaultdict(list)
    with tracekit.open(a.store) as store:
        if a.ingest:
            ingest(store, a.captures)
        ids = dict(store.sql("SELECT path, capture_id FROM captures").fetchall())
        query = f"SELECT frame, {', '.join(FIELDS.values())} FROM tcp_analysis WHERE capture_id = ?"
        files = 0
        for path in a.captures:
            cid = ids.get(os.path.abspath(path))
            if cid is None:
                continue
            files += 1
            ours = {str(r[0]): r[1:] for r in store.con.execute(query, [cid]).fetchall()}
            for frame, theirs in tshark_rows(path).items():
                mine = ours.get(frame)
                if mine is None:  # not a segment of a TCP flow here (ICMP quote, bad header)
                    continue
                for k, (name, column) in enumerate(FIELDS.items()):
                    ok = agrees(column, theirs[k] if k < len(theirs) else "", mine[k])
                    total[name] += 1
                    agree[name] += ok
                    if not ok:
                        per_file[(name, os.path.basename(path))] += 1
                        if len(examples[name]) < 3:
                            examples[name].append((os.path.basename(path), frame,
                                                   theirs[k] if k < len(theirs) else "", mine[k]))
    print(f"{files:,} captures, {total[next(iter(FIELDS))]:,} TCP packets")
    for name in FIELDS:
        share = 100 * agree[name] / max(total[name], 1)
        print(f"{name:40s} {agree[name]:>9,} of {total[name]:>9,}  {share:7.3f} %")
    print("\nmost disagreements:")
    for (name, f), n in per_file.most_common(15):
        print(f"{n:7,}  {name:38s} {f}")
    print("\nexamples (file, frame, tshark, tracekit):")
    for name, ex in examples.items():
        print(f"  {name}: {ex}")


if __name__ == "__main__":
    main()
