"""The client's receive window at the start of a transfer: the kernel's
(the client capture's advertised windows) against the replay's
(whatif/receiver.py), per segment received (docs/whatif.md, "Seventh
round").

    python tools/whatif_rwndstart.py STORE --where K=V[,K=V...]
        [--calibrate K=V[,...]] [--draws 4]

For the requests `--where` selects (a store of lab runs, ingested as the
suite does): the window (segments) the client offered on its last ACK
before it had received k segments of the response, k = 0 (what the sender
first sees), 10, 20, 40, 80, 160, 240, median over the requests; the
kernel's own `tcpi_rwnd_limited_us` (server log, beside each run's
capture) and the response's transfer at the client (first to last byte).
The receiver model fed the kernel's own arrivals (each data segment the
capture shows on the connection, a persistent one's earlier responses
included, through whatif/receiver.py as the replay feeds it; the
handshake's RTT as each RTT sample): the window it would have
offered at the same marks, so the receiver is judged apart from the
replay's sender. The replay's: the group `--calibrate` selects (default: the same) is
calibrated as the engine does and its transfers replayed as the
`--where` group's connection is (fresh, or persistent after the warm-up),
with the window on and off: the same offered-window readings from the
replay's ACKs, the time its sender sat at the receive edge, and the
transfer (the engine's T_transfer: first send to all held, so it is one
path delay longer than the client's first-to-last byte).
"""

import argparse
import json
import math
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
MARKS = (0, 10, 20, 40, 80, 160, 240)


def _kv(text):
    return dict(p.split("=", 1) for p in filter(None, (text or "").split(",")))


def _isn(p):
    """The server's first data sequence number (after its SYN-ACK), or None."""
    syn = [r[2] for r in p if not r[1] and r[6] is not None and r[6] & 0x12 == 0x12]
    return syn[0] + 1 if syn else None


def kernel_windows(con, reqs, mss, rcv_window):
    """Per request: ([window at each mark], first-to-last byte s), and
    [window at each mark] of the receiver model fed the kernel's arrivals
    on the whole connection up to the response's end (a persistent one's
    earlier responses included; the model restarts its measure where each
    response's data begins, as the replay does)."""
    out, fed = [], []
    starts = {}
    for cap, flow, fb, _ in reqs:
        starts.setdefault((cap, flow), []).append(fb)
    for cap, flow, fb, lb in reqs:
        p = con.execute("""SELECT ts_ns, from_client, tcp_seq, tcp_ack, tcp_window_bytes,
                payload_bytes, tcp_flags FROM packets WHERE capture_id = ? AND flow_id = ?
            ORDER BY frame""", [cap, flow]).fetchall()
        isn = _isn(p)
        first = min((r[2] for r in p if not r[1] and r[5] and r[0] >= fb), default=0)
        if isn is not None and not any(not r[1] and r[5] and r[0] < fb for r in p):
            first = isn  # a fresh connection: its first segment may have been lost
        acks = [(r[0], (r[3] - first) % 2**32, r[4]) for r in p if r[1] and r[3] is not None
                and r[4] is not None and r[0] <= lb]
        row = []
        for k in MARKS:
            w = [win for _, a, win in acks if a <= k * mss or a > 2**31]
            row.append(w[-1] / mss if w else math.nan)
        out.append((row, (lb - fb) / 1e9))
        rtt = con.execute("SELECT handshake_rtt_ns FROM flows WHERE capture_id = ? AND flow_id = ?",
                          [cap, flow]).fetchone()[0]
        if rcv_window and rtt and isn is not None:
            base = ((first - isn) % 2**32) // mss
            fed.append((_fed(p, isn, base, lb, mss, rcv_window, rtt / 1e9,
                             sorted(starts[(cap, flow)])), 0, 0))
    return out, fed


def _fed(p, isn, base, lb, mss, rcv_window, rtt, starts):
    """The receiver model's offered window at each mark (segments from
    `base`), fed the connection's arrivals up to `lb`."""
    from tracekit.whatif.receiver import Receiver
    r, got, cum, top, edge, seen = Receiver(*rcv_window), 0, 0, 0, int(rcv_window[0]), set()
    offers, begun = [(0, edge)], 0
    for ts, up, seq, _, _, size, _ in p:
        s = ((seq - isn) % 2**32) // mss
        if up or not size or ts > lb or s in seen or s > 2**20:
            continue
        if begun < len(starts) and ts >= starts[begun]:
            r.restart()
            begun = sum(1 for t in starts if t <= ts)
        seen.add(s)
        got, before = got + 1, cum
        while cum in seen:
            cum += 1
        top, held = max(top, s + 1), got - cum
        r.on_data(ts / 1e9, cum - before, top - cum if held else 0, rtt, held)
        edge = max(edge, cum + int(r.window(held)))
        offers.append((cum, edge - cum))
    return [[w for c, w in offers if c <= base + k][-1] for k in MARKS]


class _Watched:
    """A Transfer that records its ACKs' offered windows and the time its
    sender sat at the receive edge with window to spare."""

    def __new__(cls, base, *a):
        t = base(*a)
        t.acks, t.held, t.since = [(0, t.snd_edge)], 0.0, None
        at, try_send = t._at, t._try_send

        def _at(when, kind, arg):
            if kind == "ack":
                t.acks.append((arg[0], arg[2] - arg[0]))
            at(when, kind, arg)

        def _try_send():
            try_send()
            edge = t.nxt >= t.snd_edge and t.nxt < t.n and t.pipe < int(t.c.cwnd)
            if t.since is not None:
                t.held += t.now - t.since
            t.since = t.now if edge else None

        t._at, t._try_send = _at, _try_send
        return t


def replay_windows(cal, s, fresh, draws):
    """Per replayed response: ([window at each mark], held s, transfer s)."""
    from tracekit.whatif import engine, replayer
    from tracekit.whatif.tcp import Transfer
    path, out = replayer._path(s), []
    for i, q in enumerate(cal.requests):
        for d in range(draws):
            rng = np.random.default_rng([engine.SEED, i, d])
            conn = replayer._conn(s)
            n = replayer.segments(q.bytes_down, cal.mss, conn.head)
            for _ in range(0 if fresh else max(q.prior, s.warmup)):
                Transfer(conn, path, n, cal.mss, rng).run()
            t = _Watched(Transfer, conn, path, n, cal.mss, rng)
            done = t.run()
            row = []
            for k in MARKS:
                row.append([win for cum, win in t.acks if cum <= k][-1])
            out.append((row, t.held, done))
    return out


def _server_rwnd(runs_dir, keys):
    """tcpi_rwnd_limited_us (ms) of the given (run, request)s, from each run's server log."""
    got = {}
    for run in {r for r, _ in keys}:
        path = os.path.join(runs_dir, run, "server-events.jsonl")
        if os.path.exists(path):
            with open(path) as f:
                for e in map(json.loads, f):
                    if e.get("kind") == "tcp_info" and (run, e["request"]) in keys:
                        got[(run, e["request"])] = e["tcpi_rwnd_limited_us"] / 1e3
    return [got[k] for k in keys if k in got]


def _line(name, rows):
    a = np.array([r[0] for r in rows], dtype=float)
    med = np.nanmedian(a, axis=0)
    return f"| {name} | " + " | ".join(f"{v:.1f}" for v in med) + " |"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("--where", required=True)
    ap.add_argument("--calibrate", default="")
    ap.add_argument("--runs", default="", help="the lab's runs folder (server logs)")
    ap.add_argument("--draws", type=int, default=4)
    args = ap.parse_args(argv)
    import duckdb
    from tracekit.whatif import engine
    con = duckdb.connect(args.store, read_only=True)
    where = _kv(args.where)
    cond = " AND ".join(f"labels['{k}'] = ?" for k in where)
    reqs = con.execute(f"""SELECT capture_id, flow_id, response_first_byte_ns,
            response_last_byte_ns, run, request FROM requests WHERE {cond}
        ORDER BY run, request""", list(where.values())).fetchall()
    cal = engine.calibrated(con, {**where, **_kv(args.calibrate)}, args.draws)[0]
    fresh = where.get("connection", "fresh") == "fresh"
    kern, fed = kernel_windows(con, [r[:4] for r in reqs], cal.mss, cal.rcv_window)
    on = engine.setting(cal, {"connection": where.get("connection", "fresh"),
                              "rcv_window": "client"})
    off = engine.setting(cal, {"connection": where.get("connection", "fresh"),
                               "rcv_window": "unlimited"})
    rep_on = replay_windows(cal, on, fresh, args.draws)
    rep_off = replay_windows(cal, off, fresh, args.draws)
    print(f"{len(reqs)} requests {where}; calibrated from {len(cal.requests)} "
          f"{ {**where, **_kv(args.calibrate)} }: rcv_window {cal.rcv_window}, "
          f"queue {cal.queue_bytes:.0f} B")
    print("| window offered (segments, median) at k received | " + " | ".join(map(str, MARKS))
          + " |")
    print("| --- |" + " ---: |" * len(MARKS))
    print(_line("kernel (client capture)", kern))
    if fed:
        print(_line("model fed the kernel's arrivals", fed))
    print(_line("replay", rep_on))
    rw = _server_rwnd(args.runs, [(r[4], r[5]) for r in reqs]) if args.runs else []
    print(f"kernel: transfer (first to last byte) median {np.median([k[1] for k in kern]):.3f} s"
          + (f"; tcpi_rwnd_limited mean {np.mean(rw):.1f} ms, median {np.median(rw):.1f},"
             f" nonzero in {sum(x > 0 for x in rw)} of {len(rw)}" if rw else ""))
    for name, rows in (("window on", rep_on), ("window off", rep_off)):
        held = np.array([r[1] for r in rows]) * 1e3
        print(f"replay, {name}: transfer (first send to all held) median "
              f"{np.median([r[2] for r in rows]):.3f} s; held at the receive edge mean "
              f"{held.mean():.1f} ms, median {np.median(held):.1f}")


if __name__ == "__main__":
    main()
