"""Is the kernel's sender held by the client's receive window? The chapter
case's committed runs of one cell (fresh, direct path, one loss level),
read from the client captures as the suite ingests them (docs/whatif.md,
"Fifth round").

    python tools/whatif_rwnd.py OUT_DIR [--loss 0.036]

For each new data segment arriving at the client: the right edge (ACK +
window) the client had advertised at least one handshake RTT (less 2 ms)
before it -- what the server could have seen when it sent the segment.
Where the segment left less than one segment of room, the sender sat at the
edge until the next new segment arrived. Printed per 200 ms bin from the
response's first byte, and per transfer beside the server's own
tcpi_rwnd_limited_us (its event log); plus the `stalls` table's shares.
"""

import argparse
import collections
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))
BIN_NS, SLACK_NS = 200e6, 2e6


def cell_store(out, loss):
    """A store of the cell's runs (made once in OUT, kept)."""
    import whatif_suite
    src = os.path.join(ROOT, "captures", "chapter-case")
    with open(os.path.join(src, "chapter-case.runs.json")) as f:
        runs = [r for r in json.load(f) if r["factors"] == {
            "loss_down": loss, "path": "direct", "connection": "fresh"}]
    cell = os.path.join(out, f"fresh-{loss}")
    os.makedirs(cell, exist_ok=True)
    for r in runs:
        link = os.path.join(cell, r["run"])
        if not os.path.exists(link):
            os.symlink(os.path.join(src, r["run"]), link)
    with open(os.path.join(cell, "runs.json"), "w") as f:
        json.dump(runs, f)
    return whatif_suite.store_for(f"fresh-{loss}", os.path.join(cell, "runs.json"), out), runs


def transfer(con, cap, flow, fb, lb, mss):
    """[(bin, new segment's room at the edge in segments, window, in flight,
    ns until the next new segment)] of one response."""
    p = con.execute("""SELECT ts_ns, from_client, tcp_seq, tcp_ack, tcp_window_bytes,
            payload_bytes, tcp_flags FROM packets WHERE capture_id = ? AND flow_id = ?
        ORDER BY frame""", [cap, flow]).fetchall()
    rtt = con.execute("SELECT handshake_rtt_ns FROM flows WHERE capture_id = ? AND flow_id = ?",
                      [cap, flow]).fetchone()[0]
    isn = next(r[2] for r in p if not r[1] and r[6] & 0x12 == 0x12) + 1
    acks = [(r[0], (r[3] - isn) % 2**32, r[4]) for r in p
            if r[1] and r[3] is not None and r[6] & 0x12 == 0x10]
    at = np.array([a[0] for a in acks])
    edge = np.maximum.accumulate([a[1] + a[2] for a in acks])
    una = np.maximum.accumulate([a[1] for a in acks])
    news, hi = [], -1
    for ts, up, seq, _, _, size, _ in p:
        end = (seq - isn) % 2**32 + size
        if not up and size and fb <= ts <= lb and end > hi:
            hi = end
            news.append((ts, end))
    out = []
    for (t, end), (t2, _) in zip(news, news[1:] + [(news[-1][0], 0)]):
        i = np.searchsorted(at, t - rtt + SLACK_NS, side="right") - 1
        if i >= 0:
            out.append((int((t - fb) // BIN_NS), (edge[i] - end) / mss,
                        (edge[i] - una[i]) / mss, (end - una[i]) / mss, t2 - t))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--loss", type=float, default=0.036)
    args = ap.parse_args(argv)
    import duckdb
    db, runs = cell_store(args.out, args.loss)
    kernel = {}
    for r in runs:
        with open(os.path.join(ROOT, "captures", "chapter-case", r["run"], "server-events.jsonl")) as f:
            for e in map(json.loads, f):
                if e["kind"] == "tcp_info":
                    kernel[(e["run"], e["request"])] = e["tcpi_rwnd_limited_us"] / 1e3
    con = duckdb.connect(db, read_only=True)
    print("stalls, server -> client, % of the flows' time:", dict(con.execute("""
        SELECT state, round(100 * sum(duration_ns) / sum(sum(duration_ns)) OVER (), 1)
        FROM stalls WHERE direction = 's2c' GROUP BY state ORDER BY 2 DESC""").fetchall()))
    reqs = con.execute("""SELECT capture_id, flow_id, response_first_byte_ns, response_last_byte_ns,
        run, request FROM requests ORDER BY run, request""").fetchall()
    bins, pairs = collections.defaultdict(list), []
    for cap, flow, fb, lb, run, req in reqs:
        rows = transfer(con, cap, flow, fb, lb, 1448)
        held = sum(d for _, room, _, _, d in rows if room < 1) / 1e6
        pairs.append((held, kernel[(run, req)]))
        for b, room, win, infl, d in rows:
            bins[b].append((win, infl, d / 1e6 if room < 1 else 0.0))
    print("bin  new segments  held ms  window (median)  in flight (median)  (per transfer)")
    for b in sorted(bins):
        a = np.array(bins[b])
        print(f"{b:3d} {len(a) / len(reqs):8.1f} {a[:, 2].sum() / len(reqs):9.1f}"
              f" {np.median(a[:, 0]):10.1f} {np.median(a[:, 1]):10.1f}")
    x = np.array(pairs)
    print(f"held at the edge: mean {x[:, 0].mean():.0f} ms, median {np.median(x[:, 0]):.0f},"
          f" in {(x[:, 0] > 0).sum()} of {len(x)}; tcpi_rwnd_limited: mean {x[:, 1].mean():.0f},"
          f" median {np.median(x[:, 1]):.0f}, in {(x[:, 1] > 0).sum()};"
          f" correlation {np.corrcoef(x[:, 0], x[:, 1])[0, 1]:.2f}")


if __name__ == "__main__":
    main()
