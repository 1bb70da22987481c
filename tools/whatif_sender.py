"""The kernel's sender against the replay's, per transfer, on the chapter
case's fresh direct runs (docs/whatif.md, "Sixth round").

    python tools/whatif_sender.py [--loss 0.14] [--draws 4] [--bins]

The kernel's side is read from the committed files, not from a model: the
client's capture (every segment that arrived, and the client's ACKs with
their SACK blocks) and the forwarder's drop log (every segment the path
dropped, at the time the forwarder read it). A segment left the server one
forwarder delay before it arrived (100 ms + the mean of the 0-2 ms jitter),
a dropped one when the forwarder read it; an ACK reached the server one
delay after the client sent it. The server's own tcp_info (its event log)
is printed beside. The replay (whatif/tcp.py, the cell's path as the lab
set it, jitter off as in the suite) is logged the same way, and both go
through the same reading:

- transfer: first data sent to the client holding every byte;
- sends, retransmissions (a segment sent again);
- RTOs: a retransmission of the lowest unacknowledged segment after a
  silence of the sender of 300 ms or more with data outstanding;
- recovery: from the first ACK showing a hole (a SACK above the cumulative
  ACK) to the cumulative ACK passing the highest segment sent by then; time
  in it, and the episodes;
- rate after recovery: new segments sent in the 200 ms after an episode ends;
- per 200 ms bin from the first send (`--bins`): new segments, resends,
  the most in flight (highest sent less the cumulative ACK) the sender
  had, and the pacing rate its sends imply: sends less than 0.5 ms apart
  are one unit, a unit's segments over the gap to the next unit (gaps of
  0.5-50 ms) is the rate, median in the bin, in segments per 200 ms (BBR
  paces at 2.89 x its bandwidth estimate in Startup).

`--rates` prints, per bin, the pacing rate BBR would set from the trace
itself: tcp_rate.c's delivery-rate samples (the most recently sent segment
an ACK delivers, over the longer of its send and ACK phases, none under
min_rtt) and BBR's maximum over 10 rounds (rounds in segments delivered),
x 2.89, never lowered in Startup -- on the kernel's rebuilt trace (its
sends, the client's ACKs with their SACK blocks) and on the replay's.
"""

import argparse
import collections
import json
import os
import random
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SRC = os.path.join(ROOT, "captures", "chapter-case")
MSS, DELAY, BIN, WIRE = 1448, 0.101, 0.2, 1500


def _tshark(pcap):
    out = subprocess.run(
        ["tshark", "-r", pcap, "-T", "fields", "-E", "separator=;",
         "-e", "frame.time_epoch", "-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "tcp.seq",
         "-e", "tcp.seq_raw", "-e", "tcp.ack", "-e", "tcp.len", "-e", "tcp.flags",
         "-e", "tcp.options.sack_le", "-e", "tcp.options.sack_re"],
        capture_output=True, text=True, check=True).stdout
    return [line.split(";") for line in out.splitlines()]


def kernel_traces(run):
    """{client port: (sends [(t, seg, retx)], acks [(t, cum, hole)], done, n)} of one run."""
    d = os.path.join(SRC, run)
    rows = _tshark(os.path.join(d, "client.pcap"))
    with open(os.path.join(d, "drops.jsonl")) as f:
        drops = [json.loads(x) for x in f]
    out = {}
    for port in {r[2] for r in rows if r[1] == "9200"}:
        conn = [r for r in rows if port in (r[1], r[2])]
        isn = next(int(r[4]) for r in conn if r[1] == "9200" and int(r[7], 16) & 0x12 == 0x12)
        ev = []  # (server time, seg, arrived)
        for r in conn:
            if r[1] == "9200" and int(r[6]):
                ev.append((float(r[0]) - DELAY, (int(r[3]) - 1) // MSS, float(r[0])))
        for x in drops:
            if x.get("dst_port") == int(port) and x.get("payload_bytes"):
                ev.append((x["t_ns"] / 1e9, ((x["tcp_seq"] - isn) % 2**32 - 1) // MSS, None))
        ev.sort()
        seen, sends = set(), []
        for t, s, _ in ev:
            sends.append((t, s, s in seen))
            seen.add(s)
        n = max(s for _, s, _ in ev) + 1
        got, cum, done = set(), 0, None
        for _, s, ta in sorted((e for e in ev if e[2] is not None), key=lambda e: e[2]):
            got.add(s)
            while cum in got:
                cum += 1
            if cum == n and done is None:
                done = ta - DELAY
        acks = []
        for r in conn:
            if r[2] == "9200" and int(r[7], 16) & 0x10 and not int(r[6]):
                c = (int(r[5]) - 1 + MSS - 1) // MSS
                hole = bool(r[8]) and max(int(x) for x in r[8].split(",")) > int(r[5])
                blocks = [((int(a) - 1) // MSS, (int(b) - 1 + MSS - 1) // MSS)
                          for a, b in zip(r[8].split(","), r[9].split(","))] if r[8] else []
                acks.append((float(r[0]) + DELAY, c, hole, blocks))
        out[int(port)] = (sends, acks, done, n)
    return out


def replay_traces(loss, draws, seed=7, rwnd=None, jitter=0.0):
    """[(sends, acks, done, n)] of the replay on the cell's path."""
    from tracekit.whatif import tcp

    class Logged(tcp.Transfer):
        def __init__(self, *a):
            super().__init__(*a)
            self.log_sends, self.log_acks = [], []

        def _send_segment(self, s, retx):
            self.log_sends.append((self.now, s, bool(self.sent_at[s]) or retx or s < self.nxt - 1))
            super()._send_segment(s, retx)

        def _on_ack(self, arg):
            cum, s = arg[:2]
            self.log_acks.append((self.now, cum, s > cum, [(s, s + 1)] if s >= cum else []))
            super()._on_ack(arg)

    rng, out = random.Random(seed), []
    for _ in range(draws):
        path = tcp.Path(rtt=0.2, rate=333e6 / 8, queue_bytes=8325000, loss=loss, jitter=jitter)
        conn = tcp.Conn(cc="bbr", initcwnd=10)
        if rwnd:
            from tracekit.whatif.receiver import Receiver
            conn.rcv = Receiver(*rwnd)
        tr = Logged(conn, path, 245, MSS, rng)
        done = tr.run()
        sends = []
        seen = set()
        for t, s, _ in tr.log_sends:
            sends.append((t, s, s in seen))
            seen.add(s)
        out.append((sends, tr.log_acks, done, 245))
    return out


def reading(sends, acks, done, n):
    """The figures of one transfer (the module docstring), and its bins."""
    t0 = sends[0][0]
    f = {"transfer": done - t0, "sends": len(sends), "retx": sum(r for _, _, r in sends)}
    # the sender's cumulative ACK over time, and recovery episodes
    ai, cum, hi, rto = 0, 0, -1, 0
    rec_start, rec_point, in_rec, episodes, after = None, 0, False, [], []
    events = sorted([(t, 0, s, r) for t, s, r in sends] + [(t, 1, c, h) for t, c, h, _ in acks])
    last_send, bins = t0, collections.defaultdict(lambda: [0, 0, 0])
    for t, kind, a, b in events:
        if t > done + 0.3:
            break
        if kind == 0:
            if b and a == cum and t - last_send >= 0.3 and hi >= cum:
                rto += 1
            last_send = t
            hi = max(hi, a)
            k = int((t - t0) / BIN)
            bins[k][1 if b else 0] += 1
            bins[k][2] = max(bins[k][2], hi + 1 - cum)
        else:
            cum = max(cum, a)
            if not in_rec and b:
                in_rec, rec_start, rec_point = True, t, hi + 1
            elif in_rec and cum >= rec_point:
                in_rec = False
                episodes.append(t - rec_start)
                after.append(t)
    news = [t for t, _, r in sends if not r]
    rate = [sum(1 for x in news if e < x <= e + BIN) for e in after if e + BIN < done]
    f.update(rto=rto, episodes=len(episodes), recovery=sum(episodes),
             after=float(np.mean(rate)) if rate else np.nan)
    units = []
    for t, _, _ in sends:
        if units and t - units[-1][1] < 0.0005:
            units[-1][1:] = [t, units[-1][2] + 1]
        else:
            units.append([t, t, 1])
    rates = collections.defaultdict(list)
    for u, v in zip(units, units[1:]):
        if 0.0005 < v[0] - u[0] < 0.05:
            rates[int((u[0] - t0) / BIN)].append(u[2] * BIN / (v[0] - u[0]))
    for k, r in rates.items():
        bins[k].append(float(np.median(r)))
    return f, bins


def bbr_pacing(sends, acks, min_rtt=0.2005):
    """{bin: [pacing rate after each valid sample, segments per 200 ms]}."""
    t0 = sends[0][0]
    ev = sorted([(t, 0, s, None) for t, s, _ in sends] + [(t, 1, c, b) for t, c, _, b in acks],
                key=lambda e: (e[0], e[1]))
    info, out, done = {}, set(), set()
    delivered, d_time, first_tx, cum, next_round, rnd = 0, t0, t0, 0, 0, 0
    samples, rate, res = {}, 2.89 * 10 / min_rtt, collections.defaultdict(list)
    for t, kind, a, blocks in ev:
        if kind == 0:
            if not out:
                first_tx = d_time = t
            info[a] = (t, delivered, d_time, first_tx)
            out.add(a)
            continue
        new = {x for x in range(cum, a) if x not in done and x in info}
        new |= {x for lo, hi in blocks for x in range(max(lo, a), hi) if x not in done and x in info}
        cum = max(cum, a)
        if not new:
            continue
        done |= new
        out -= new
        tx, prior, prior_t, prior_first = info[max(new, key=lambda x: (info[x][0], x))]
        first_tx = max(first_tx, tx)
        delivered, d_time = delivered + len(new), t
        interval = max(tx - prior_first, t - prior_t)
        if interval < min_rtt:
            continue
        if prior >= next_round:
            next_round, rnd = delivered, rnd + 1
        samples[rnd] = max(samples.get(rnd, 0.0), (delivered - prior) / interval)
        rate = max(rate, 2.89 * max(v for r, v in samples.items() if r > rnd - 10))
        res[int((t - t0) / BIN)].append(rate * BIN)
    return res


def print_rates(name, traces, nbins):
    per = collections.defaultdict(list)
    for tr in traces:
        for k, v in bbr_pacing(tr[0], tr[1]).items():
            per[k].append(np.median(v))
    print(f"   {name} trace, BBR's pacing from its samples:",
          " ".join(f"{np.median(per[k]) if per[k] else np.nan:.0f}" for k in range(nbins)))


def summary(name, rows, nbins=None):
    keys = ["transfer", "sends", "retx", "rto", "episodes", "recovery", "after"]
    a = {k: np.array([r[0][k] for r in rows], dtype=float) for k in keys}
    q = np.percentile(a["transfer"], [25, 50, 75, 90])
    print(f"{name:8s} transfer q25/med/q75/p90 {q[0]:.2f}/{q[1]:.2f}/{q[2]:.2f}/{q[3]:.2f} s;"
          f" sends {a['sends'].mean():.1f}, retx {a['retx'].mean():.1f},"
          f" RTOs {a['rto'].sum() / len(rows) * 40:.1f} per 40,"
          f" episodes {a['episodes'].mean():.1f}, recovery {a['recovery'].mean():.2f} s"
          f" (median {np.median(a['recovery']):.2f}),"
          f" new in 200 ms after an episode {np.nanmean(a['after']):.1f}")
    if nbins:
        line = []
        for k in range(nbins):
            v = np.array([r[1].get(k, [0, 0, 0])[:3] for r in rows], dtype=float)
            pace = [r[1][k][3] for r in rows if len(r[1].get(k, ())) > 3]
            line.append(f"{v[:, 0].mean():.1f}+{v[:, 1].mean():.1f}r/{np.median(v[:, 2]):.0f}"
                        f"/{np.median(pace) if pace else np.nan:.0f}")
        print("   bins new+resent/in flight/paced at:", " ".join(line))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loss", type=float, default=0.14)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--bins", type=int, default=0)
    ap.add_argument("--off", default="", help="replay rules to switch off: REO_TIMER,DELIVERED_ROUNDS")
    ap.add_argument("--rates", action="store_true", help="BBR's pacing from the trace's rate samples")
    ap.add_argument("--jitter", type=float, default=0.0, help="the replay's jitter, s (the lab's: 0.004)")
    ap.add_argument("--rwnd", default="", metavar="FIRST,CLAMP",
                    help="replay the client's receive window (segments), as rcv_window=client")
    args = ap.parse_args(argv)
    from tracekit.whatif import tcp
    for name in filter(None, args.off.split(",")):
        setattr(tcp, name, False)
    with open(os.path.join(SRC, "chapter-case.runs.json")) as f:
        runs = [r["run"] for r in json.load(f) if r["factors"] == {
            "loss_down": args.loss, "path": "direct", "connection": "fresh"}]
    kern, info, ktr = [], [], []
    for run in runs:
        for tr in kernel_traces(run).values():
            kern.append(reading(*tr))
            ktr.append(tr)
        with open(os.path.join(SRC, run, "server-events.jsonl")) as f:
            info += [e for e in map(json.loads, f) if e["kind"] == "tcp_info"]
    print(f"loss {args.loss}: {len(kern)} kernel transfers; tcp_info: retrans"
          f" {np.mean([e['tcpi_total_retrans'] for e in info]):.1f}, cwnd at the end"
          f" {np.median([e['tcpi_snd_cwnd'] for e in info]):.0f},"
          f" rwnd-limited {np.mean([e['tcpi_rwnd_limited_us'] for e in info]) / 1e3:.0f} ms")
    summary("kernel", kern, args.bins)
    if args.rates:
        print_rates("kernel", ktr, args.bins or 9)
    rwnd = tuple(map(float, args.rwnd.split(","))) if args.rwnd else None
    rtr = replay_traces(args.loss, args.draws, rwnd=rwnd, jitter=args.jitter)
    summary("replay", [reading(*t) for t in rtr], args.bins)
    if args.rates:
        print_rates("replay", rtr, args.bins or 9)


if __name__ == "__main__":
    main()
