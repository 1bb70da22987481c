"""The replay fed the path's own losses: each response of the lab's runs
replayed with exactly the segments the emulated path dropped at random
(its drop log), against the kernel's time for it (docs/whatif.md, eighth
round).

    python tools/whatif_droplog.py RUNS_DIR [--save FIXTURE.json]
    python tools/whatif_droplog.py --fixture FIXTURE.json
    python tools/whatif_droplog.py --delay-line STORE FOLDER TAG CC RTT_MS RATE_MBPS QUEUE ...

RUNS_DIR is a `tracekit lab run --out` folder (a manifest.json, drops.jsonl,
server-events.jsonl, client-events.jsonl and server.pcap per run). Per run
on the direct path with random loss: the server's initial sequence number
from its capture's SYN-ACK (tshark), each random drop ("loss" in
drops.jsonl; the queue's own drops are left to the replay's queue) as
(response, segment, transmission); the kernel's time is the client log's
first byte to the end of the response (the ISN from the client's capture
where the server's is not kept). The replay (whatif/tcp.py) runs the
run's path as its manifest states it (delays, rate, queue, jitter; the
run's congestion control, from its settings or the server's tcp_info;
initial window 10) and the run's connections as they
were: fresh, or one connection for the warm-up responses and the measured
ones. No random draw remains but the jitter's (a fixed seed), so the
comparison is transfer by transfer: the sender, the receiver's ACKs and
window, the queue -- everything but the loss process.

--clock-phase MS replays the client's timestamp clock ticking MS after
each transfer's start (whatif/delack.py's TS_CLOCK; by default the
receiver's RTT samples are exact): where Linux's receiver read 21 then 39
segments, not 20 then 40, a CUBIC transfer's HyStart ends later, and a
persistent connection's first warm response bursts into the queue (the
twenty-third round).

--save writes what the comparison needs (paths, drops, kernel times; a few
kB) for tests/test_whatif_droplog.py; --fixture replays such a file.
"""

import argparse
import collections
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tracekit.whatif import tcp  # noqa: E402
from tracekit.whatif.calibrate import WIRE_HEADER  # noqa: E402
from tracekit.whatif.receiver import Receiver  # noqa: E402

MSS = 1448
# The lab client's window (tcp_rmem 131072): its handshake ACK offers 63 x 1,024
# bytes, 55.9 segments over the first flight (what calibrate._rcv_window reads)
RCV = (63 * 1024 / MSS, 55.9)


def _isns(pcap):
    out = subprocess.run(["tshark", "-r", pcap, "-Y", "tcp.flags.syn==1 && tcp.flags.ack==1",
                          "-T", "fields", "-e", "tcp.dstport", "-e", "tcp.seq_raw"],
                         capture_output=True, text=True, check=True).stdout
    return {int(a): int(b) for a, b in (line.split("\t") for line in out.splitlines() if line)}


def _jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_run(d, congestion="cubic"):
    """One run as the comparison needs it, or None (no random loss, a tunnel)."""
    with open(os.path.join(d, "manifest.json")) as f:
        m = json.load(f)
    st, down = m["settings"], m["path"]["down"]
    if st.get("path", "direct") != "direct" or not down["loss"]:
        return None
    size = m["workload"]["response_bytes"]
    server = _jsonl(os.path.join(d, "server-events.jsonl"))
    client = _jsonl(os.path.join(d, "client-events.jsonl"))
    port = {e["request"]: e["remote_port"] for e in server if e["kind"] == "model_start"}
    order = [e["request"] for e in server if e["kind"] == "model_start"]
    first = {e["request"]: e["ts"] for e in client if e["kind"] == "first_byte"}
    end = {e["request"]: e["ts"] for e in client if e["kind"] == "request_end"}
    isn = _isns(os.path.join(d, "server.pcap" if os.path.exists(os.path.join(d, "server.pcap"))
                             else "client.pcap"))  # the SYN-ACK: seen at both ends
    count = collections.Counter()
    drops = collections.defaultdict(list)  # port -> [(byte offset, transmission)]
    for x in sorted(_jsonl(os.path.join(d, "drops.jsonl")), key=lambda x: x["t_ns"]):
        if x.get("reason") != "loss" or not x.get("payload_bytes") or x["dst_port"] not in isn:
            continue
        off = (x["tcp_seq"] - isn[x["dst_port"]] - 1) % 2 ** 32
        count[(x["dst_port"], off)] += 1
        drops[x["dst_port"]].append((off, count[(x["dst_port"], off)]))
    conns = collections.defaultdict(list)  # port -> requests in order (warm-up first)
    for r in order:
        conns[port[r]].append(r)
    info = [e for e in server if e["kind"] == "tcp_info" and e.get("congestion")]
    cc = st.get("congestion") or (info[0]["congestion"] if info else congestion)
    return {
        "run": m["run"], "cc": cc, "connection": st["connection"],
        "rtt": (m["path"]["up"]["delay_ms"] + down["delay_ms"]) / 1e3,
        "jitter": (m["path"]["up"]["jitter_ms"] + down["jitter_ms"]) / 1e3,
        "loss": down["loss"],
        "rate": down["rate_mbps"] * 1e6 / 8, "queue": down["queue_bytes"], "size": size,
        "connections": [{"requests": reqs, "drops": drops.get(p, [])} for p, reqs in conns.items()],
        "kernel": {r: (end[r] - first[r]) / 1e9 for r in order if r in first and r in end},
    }


def read_delay_line(store, folder, name, cc, rtt_ms, rate_mbps, queue):
    """One run of the delay line (tests/data/whatif/delay-line) as the
    comparison needs it: its client capture `c-NAME.pcap` ingested in
    `store` (a tracekit store), its random drops from `folder`'s
    drops-NAME.jsonl, the kernel's time a response's first to last byte at
    the client; the path as the run was made (no jitter)."""
    import tracekit
    with tracekit.open(store, read_only=True) as s:
        found = s.con.execute("SELECT capture_id FROM captures WHERE path LIKE ?",
                              [f"%c-{name}.pcap"]).fetchone()
        if found is None:
            raise SystemExit(f"{store}: no capture c-{name}.pcap")
        cap = found[0]
        flows = s.con.execute("""SELECT DISTINCT f.flow_id, f.client_port, p.tcp_seq FROM flows f
            JOIN packets p ON p.capture_id = f.capture_id AND p.flow_id = f.flow_id
            WHERE f.capture_id = ? AND NOT p.from_client AND p.tcp_flags & 2 = 2
            ORDER BY f.flow_id""", [cap]).fetchall()
        reqs = s.con.execute("""SELECT flow_id, response_last_byte_ns - response_first_byte_ns,
            bytes_down FROM requests WHERE capture_id = ? ORDER BY response_first_byte_ns""",
                             [cap]).fetchall()
    kernel, by_flow = {}, collections.defaultdict(list)
    for i, (fl, ns, _) in enumerate(reqs):
        kernel[f"{name}/{i}"] = ns / 1e9
        by_flow[fl].append(f"{name}/{i}")
    # the path's own losses: random, or a Gilbert-Elliott chain's ("burst", set 18)
    logged = sorted((x for x in _jsonl(os.path.join(folder, f"drops-{name}.jsonl"))
                     if x["reason"] in ("random", "burst") and x["payload_len"]),
                    key=lambda x: x["time"])
    connections = []
    for fl, port, isn in flows:
        count, drops = collections.Counter(), []
        for x in (x for x in logged if x["dport"] == port):
            off = (x["seq"] - isn - 1) % 2 ** 32
            count[off] += 1
            drops.append((off, count[off]))
        connections.append({"requests": by_flow[fl], "drops": drops})
    return {"run": name, "cc": cc, "connection": name.split("-")[-2], "rtt": rtt_ms / 1e3,
            "jitter": 0.0, "rate": rate_mbps * 1e6 / 8, "queue": queue, "size": reqs[0][2],
            "connections": connections, "kernel": kernel}


def _delay_line_runs(folder, tag, rtt, mode):
    """The runs' names as the delay line's make.py names them -- TAG, or
    TAG/LEVEL (e.g. g1/ge) since set 18 -- in round order, as far as their
    drop logs go."""
    tag, _, level = tag.partition("/")
    out = []
    for r in range(100):
        name = "-".join(filter(None, (tag, f"rtt{rtt}", level, mode, str(r))))
        if not os.path.exists(os.path.join(folder, f"drops-{name}.jsonl")):
            break
        out.append(name)
    return out


class _Scripted(tcp.Transfer):
    """A transfer whose random losses are the given (segment, transmission)s."""

    def __init__(self, drops, *a):
        super().__init__(*a)
        self.drops, self.sent_n = drops, collections.Counter()

    def _emit(self, s):
        self.sent_n[s] += 1
        if (s, self.sent_n[s]) not in self.drops:
            super()._emit(s)  # the path without random loss: the queue, the delay


def replay_run(run, rcv=RCV):
    """{request: the replay's first-to-last byte (s)} of one run; `rcv`: the
    client's receive window (first offer, clamp; segments) or None."""
    n = -(-run["size"] // MSS)
    path = tcp.Path(rtt=run["rtt"], rate=run["rate"], queue_bytes=run["queue"],
                    jitter=run.get("jitter", 0.0), header=WIRE_HEADER)
    first_byte = run["rtt"] / 2 + (MSS + WIRE_HEADER) / run["rate"]
    out = {}
    for conn in run["connections"]:
        c = tcp.Conn(cc=run["cc"], initcwnd=10)
        c.srtt, c.rttvar, c.min_rtt = run["rtt"], run["rtt"] / 2, run["rtt"]
        c.rcv = Receiver(*rcv) if rcv else None
        for k, req in enumerate(conn["requests"]):
            base = k * run["size"]
            drops = {((off - base) // MSS, t) for off, t in conn["drops"]
                     if base <= off < base + run["size"]}
            done = _Scripted(drops, c, path, n, MSS, np.random.default_rng(k)).run()
            out[req] = done - first_byte
    return out


def compare(runs, rcv=RCV):
    rows = []
    for run in runs:
        got = replay_run(run, rcv)
        for req, k in run["kernel"].items():
            if req in got:
                rows.append((run["cc"], run["connection"], run["run"], req, k, got[req]))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs_dir", nargs="?")
    ap.add_argument("--fixture")
    ap.add_argument("--save")
    ap.add_argument("--congestion", default="cubic",
                    help="the congestion control of runs that do not say (the host's default)")
    ap.add_argument("--no-window", action="store_true", help="replay without the client's window")
    ap.add_argument("--delay-line", nargs=7, action="append", default=[],
                    metavar=("STORE", "FOLDER", "TAG", "CC", "RTT_MS", "RATE_MBPS", "QUEUE"),
                    help="a delay-line set's runs at one RTT (its client captures in STORE, "
                         "its logs in FOLDER, named as make.py names them: TAG, or TAG/LEVEL "
                         "since set 18, e.g. h1/ge); repeatable")
    ap.add_argument("--clock-phase", type=float, metavar="MS",
                    help="the client's timestamp clock ticks MS after a transfer's start")
    args = ap.parse_args(argv)
    if args.clock_phase is not None:
        from tracekit.whatif import delack
        delack.TS_CLOCK, delack.TS_PHASE = True, args.clock_phase / 1e3
    if args.delay_line:
        runs = [read_delay_line(store, folder, name, cc, float(rtt), float(rate), int(queue))
                for store, folder, tag, cc, rtt, rate, queue in args.delay_line
                for mode in ("persistent", "fresh")
                for name in _delay_line_runs(folder, tag, rtt, mode)]
    elif args.fixture:
        with open(args.fixture) as f:
            runs = json.load(f)
    else:
        runs = [r for r in (read_run(os.path.join(args.runs_dir, d), args.congestion)
                            for d in sorted(os.listdir(args.runs_dir))
                            if os.path.exists(os.path.join(args.runs_dir, d, "manifest.json")))
                if r]
    if args.save:
        with open(args.save, "w") as f:
            json.dump(runs, f, separators=(",", ":"))
    rows = compare(runs, None if args.no_window else RCV)
    print("| congestion | connection | run | request | kernel s | replay s | error |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: |")
    for cc, conn, run, req, k, r in rows:
        print(f"| {cc} | {conn} | {run} | {req} | {k:.3f} | {r:.3f} | {(r - k) / k:+.0%} |")
    for key in sorted({(cc, conn) for cc, conn, *_ in rows}):
        err = np.array([abs(r - k) / k for cc, conn, _, _, k, r in rows if (cc, conn) == key])
        print(f"\n{key[0]} {key[1]}: {len(err)} responses, median |error| "
              f"{np.median(err) * 100:.1f} %, within 10 %: {int((err <= 0.10).sum())}", end="")
    print()
    return rows


if __name__ == "__main__":
    main()
