"""How closely the emulated path holds its settings, measured from outside it.

One bulk TCP download of real kernel TCP over the path, recorded by tcpdump
in both namespaces; then, from the two captures alone (read by tshark, not
by tracekit):

- rate: the bytes the client's side received during the longest stretch in
  which, by the model's schedule (wan.Link replayed on the server's
  capture), the bottleneck never idled, over that stretch's duration at the
  client;
- delay, upstream: each ACK's one-way time, from the client's capture to the
  server's (one clock: the namespaces share the machine's), less the
  configured delay;
- delay, downstream: each data packet's arrival at the client against the
  schedule the model (wan.Link) gives it from the time the server's capture
  saw it leave -- the one-way delay plus the wait at the bottleneck.

`calibrate(spec, workdir, nbytes)` runs it; `benchmarks/emulator.py` and
tests/test_lab_emulator.py use it.
"""

import bisect
import dataclasses
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import typing

from ..core.errors import TracekitError
from .disturbance import PERIOD_NS
from .netns import in_ns
from .record import running, tcpdump
from .wan import SERVER_ADDR, EmulatedPath, Link, Rng

PORT = 9100
LATE_MS = 0.5  # the bound on the delay's error
# The sender's buffer has room for any window; the receiver's caps its window
# between one and two bandwidth-delay products (the kernel advertises a share
# of tcp_rmem's maximum): the bottleneck never idles and its queue, sized at one
# product, never overflows -- a measure of the path, not of loss recovery.
SEND_BUFFER = "4096 1048576 134217728"


def receive_buffer(spec):
    bdp = spec.down.rate_mbps * 1e6 / 8 * (spec.up.delay_ms + spec.down.delay_ms) / 1e3
    return f"4096 1048576 {int(2.4 * bdp)}"


SERVER = f"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("{SERVER_ADDR}", {PORT}))
s.listen()
print("up", flush=True)
c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, sys.argv[2].encode())
left, block = int(sys.argv[1]), b"x" * (1 << 20)
while left > 0:
    left -= c.send(block[:left])
c.close()
"""

CLIENT = f"""
import socket, sys
s = socket.create_connection(("{SERVER_ADDR}", {PORT}))
buf, n = bytearray(1 << 20), 0
while True:
    k = s.recv_into(buf)
    if not k:
        break
    n += k
print(n)
"""


def bulk(path, workdir, nbytes, congestion="cubic"):
    """Download `nbytes` over `path`; return (client pcap, server pcap)."""
    for ns, key, value in ((path.server_ns, "net.ipv4.tcp_wmem", SEND_BUFFER),
                           (path.client_ns, "net.ipv4.tcp_rmem", receive_buffer(path.spec))):
        subprocess.run(in_ns(ns, "sysctl", "-q", "-w", f"{key}={value}"), check=True)
    outs = [f"{workdir}/calibrate-{side}.pcap" for side in ("client", "server")]
    with running(path.server, [sys.executable, "-c", SERVER, str(nbytes), congestion],
                 "bulk sender"), tcpdump(path.client, outs[0], immediate=False), \
            tcpdump(path.server, outs[1], immediate=False):
        got = subprocess.run(path.client([sys.executable, "-c", CLIENT]), check=True,
                             capture_output=True, text=True, timeout=600).stdout
    if int(got) != nbytes:
        raise TracekitError(f"the bulk download received {got.strip()} of {nbytes} bytes")
    return outs


def packets(pcap):
    """[(time s, ip src, (ip id, tcp seq, tcp ack), ip length, tcp payload bytes)],
    as tshark reads them."""
    out = subprocess.run(["tshark", "-r", pcap, "-T", "fields", "-e", "frame.time_epoch",
                          "-e", "ip.src", "-e", "ip.id", "-e", "tcp.seq_raw", "-e", "tcp.ack_raw",
                          "-e", "ip.len", "-e", "tcp.len"],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        t, src, ident, seq, ack, length, payload = line.split("\t")
        if not ident:  # not IPv4 (the kernel's own IPv6 chatter on the device)
            continue
        rows.append((float(t), src, (int(ident, 16), int(seq or 0), int(ack or 0)), int(length),
                     int(payload or 0)))
    return rows


class Late(typing.NamedTuple):
    """A packet more than LATE_MS after its schedule, and the evidence that may
    explain it."""
    arrival: float  # s, at the client's or the server's capture
    late_ms: float  # after the schedule the model gives it from the sender's capture
    # downstream: the packet that began its busy stretch, by the same schedule
    # (arrival, ms late), or None
    start: tuple = None
    # the schedule kept from when the forwarder read it (within LATE_MS), and
    # the packet that began its busy stretch in the forwarder (itself,
    # upstream) read late while its lane had nothing else to do
    woke_late: bool = False


SLEEP_SLACK_NS = 1_000  # a sleep's deadline and a due time are taken from two clocks


class Lane:
    """What one of the forwarder's lanes did, from its deliveries log
    (wan.write_deliveries): when it read each packet (keyed as `packets` keys
    them), and when it read anything or was inside a write (the write to the
    device and the log's flush, from begun to returned), in seconds."""

    def __init__(self, rows):
        self.read = {(d["ip_id"], d["tcp_seq"], d["tcp_ack"]): d["read_ns"] / 1e9
                     for d in rows if "tcp_seq" in d}
        self.reads = sorted(d["read_ns"] / 1e9 for d in rows)
        writes = sorted((d["sent_ns"] / 1e9, d["done_ns"] / 1e9) for d in rows)
        self.begun = [w for w, _ in writes]
        self.returned = [r for _, r in writes]
        # the packets it began to write more than LATE_MS after they were due,
        # having asked to be woken by then: (due, begun)
        self.overdue = [((d["sent_ns"] - d["late_ns"]) / 1e9, d["sent_ns"] / 1e9)
                        for d in rows if d["late_ns"] > LATE_MS * 1e6
                        and d["slept_to_ns"] <= d["sent_ns"] - d["late_ns"] + SLEEP_SLACK_NS]

    def idle_from(self, t):
        """From when on, at `t` or after, the lane was doing nothing: the end of
        a write it was inside at `t`."""
        i = bisect.bisect_right(self.begun, t)
        return max(t, self.returned[i - 1]) if i else t

    def next_sign(self, t):
        """The lane's first read or begun write after `t`."""
        i, j = bisect.bisect_right(self.reads, t), bisect.bisect_right(self.begun, t)
        return min(self.reads[i] if i < len(self.reads) else float("inf"),
                   self.begun[j] if j < len(self.begun) else float("inf"))

    def held(self, waiting):
        """The spell (from, to) in which the lane, with work waiting since
        `waiting` (a packet to read, or one due), did nothing for more than
        LATE_MS; or None."""
        start = self.idle_from(waiting)
        end = self.next_sign(start)
        return (start, end) if end - start > LATE_MS / 1e3 else None


def merged(spells):
    """Overlapping (from, to) spells as one."""
    out = []
    for a, b in sorted(spells):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return out


def lanes(deliveries):
    """Both lanes' `Lane`, from a deliveries.jsonl."""
    rows = {"up": [], "down": []}
    with open(deliveries) as f:
        for line in f:
            d = json.loads(line)
            rows[d["direction"]].append(d)
    return {way: Lane(r) for way, r in rows.items()}


def measure(spec, client_pcap, server_pcap, deliveries=None):
    """The path's rate and one-way delays as the two captures saw them; with
    the forwarder's deliveries log, the spells in which a lane did nothing
    while a packet waited for it (`lane_held`) and which late packets were
    late only by the lane's late reading (`Late.woke_late`)."""
    client, server = packets(client_pcap), packets(server_pcap)
    lane = lanes(deliveries) if deliveries else {}
    held = {way: set() for way in ("up", "down")}
    for way, ln in lane.items():
        held[way].update(filter(None, (ln.held(due) for due, _ in ln.overdue)))

    def woke_late(way, sent, got):
        """The lane read a packet more than LATE_MS after the sender's capture
        saw it leave, having done nothing for more than LATE_MS while it
        waited, and read it then or in the catch-up after."""
        spell = lane[way].held(sent) if got - sent > LATE_MS / 1e3 else None
        if spell and got <= spell[1] + CATCH_UP * (spell[1] - spell[0]):
            held[way].add(spell)
            return True
        return False

    down_src = SERVER_ADDR
    # upstream: every packet matched by IP id, sequence and acknowledgement numbers
    sent_up = {key: t for t, src, key, _, _ in client if src != down_src}
    up_delay = spec.up.delay_ms
    up = []
    for t, src, key, _, _ in server:
        if src != down_src and key in sent_up:
            late = (t - sent_up[key]) * 1e3 - up_delay
            got = lane["up"].read.get(key) if lane else None
            woke = late > LATE_MS and got is not None \
                and (t - got) * 1e3 - up_delay <= LATE_MS and woke_late("up", sent_up[key], got)
            up.append(Late(t, late, None, woke))
    # downstream: the model's schedule from the server's capture, for what arrived
    # (what arrived was admitted: the replay's queue never refuses it); and the
    # same from when the forwarder read each packet
    arrived = {key: t for t, src, key, _, _ in client if src == down_src}

    def replay():
        return Link(dataclasses.replace(spec.down, loss=0.0, jitter_ms=0.0, burst_p=0.0,
                                        queue_bytes=1 << 62), Rng(0))

    link, forwarder = replay(), replay()
    down_error, runs, start, start_woke = [], [[]], (0.0, 0.0), False
    # (times from the first packet: a double holding seconds since 1970 is only
    # good to 0.24 us, and a schedule that adds 36 us per packet would drift)
    t0 = server[0][0] if server else 0.0
    for t, src, key, length, _ in server:
        if src == down_src and key in arrived:
            queued = link.busy_until > t - t0  # the bottleneck was still sending the one before
            due, _ = link.admit(t - t0, length)
            late = (arrived[key] - t0 - due) * 1e3
            if not queued:  # a busy stretch begins
                runs.append([])
                start = (arrived[key], late)
            woke = False
            got = lane["down"].read.get(key) if lane else None
            if got is not None:
                if forwarder.busy_until <= got - t0:  # a busy stretch begins in the forwarder
                    start_woke = woke_late("down", t, got)
                forwarder_due, _ = forwarder.admit(got - t0, length)
                woke = start_woke and late > LATE_MS \
                    and (arrived[key] - t0 - forwarder_due) * 1e3 <= LATE_MS
            down_error.append(Late(arrived[key], late, start, woke))
            runs[-1].append((arrived[key], length))
    # rate: the longest stretch in which, by the schedule, the bottleneck never
    # idled, timed at the client's end
    busy = max(runs, key=len)
    span = busy[-1][0] - busy[0][0] if busy else 0.0
    rate = sum(length for _, length in busy[1:]) * 8 / span / 1e6 if span > 0 else 0.0
    return {"rate_mbps": rate, "busy_s": span, "busy_packets": len(busy),
            "up_error_ms": summary(sorted(x.late_ms for x in up)),
            "down_error_ms": summary(sorted(x.late_ms for x in down_error)),
            "packets": {"client": len(client), "server": len(server)},
            # spells in which a lane of the forwarder, with a packet waiting
            # for it, did nothing: (from s, to s)
            "lane_held": {way: merged(spells) for way, spells in held.items()},
            # every packet more than 0.5 ms late, with its evidence
            "late": {"up": [x for x in up if x.late_ms > LATE_MS],
                     "down": [x for x in down_error if x.late_ms > LATE_MS]}}


def summary(values):
    if not values:
        return {}
    def q(p):
        return values[min(len(values) - 1, int(p * len(values)))]
    return {"n": len(values), "min": values[0], "median": statistics.median(values),
            "p99": q(0.99), "p999": q(0.999), "max": values[-1]}


CATCH_UP = 4  # a lane kept from its CPU for A ms is behind for up to 4 A ms more (at 80 % busy)


def unexplained(late, probe, lane_held=()):
    """The late packets (`Late`) that no disturbance explains, as (arrival s,
    ms late).

    A packet due while the probe saw the machine away (a late wake-up from
    `start` to `end`, on any CPU) or while the forwarder was catching up
    afterwards (until end + CATCH_UP x (end - start)) is explained: its
    lateness is the machine's, not the emulator's. So is a packet that
    queued behind the start of a busy stretch that came late for such a
    reason, when it is no later than that start (+ 0.5 ms): the bottleneck
    serves from when the stretch really began. And so is one the forwarder
    delivered on the schedule of when it read it, whose lane had read it, or
    the start of its busy stretch, late while it did nothing else
    (`Late.woke_late`); and one due while that direction's lane, with a
    packet waiting for it, did nothing (`lane_held`, from `measure`: (from
    s, to s)) or caught up afterwards. A real-time thread that is runnable runs
    unless the machine keeps it from its CPU, and one asleep is woken when
    its packet comes: the lane was not run -- the machine's doing, seen in
    the forwarder's own log where the probe, which sees a spell only when it
    covers one of its 1 ms deadlines, may not.
    """
    away = sorted([(s + PERIOD_NS, w) for _, s, w in probe.late]
                  + [(int(a * 1e9), int(b * 1e9)) for a, b in lane_held])
    starts = [start for start, _ in away]
    # the latest end of catch-up among the spells that began by each start
    reach = list(itertools.accumulate((end + CATCH_UP * (end - start) for start, end in away),
                                      max))

    def held(arrival, late_ms):
        due_ns, arrival_ns = (arrival - late_ms / 1e3) * 1e9, arrival * 1e9
        began = bisect.bisect_right(starts, arrival_ns)  # spells that began before it arrived
        return began > 0 and reach[began - 1] >= due_ns

    out = []
    for x in late:
        if x.woke_late or held(x.arrival, x.late_ms):
            continue
        # a packet that queued behind a late start is as late as that start:
        # explained with it, if that is all its lateness
        if x.start and x.late_ms - x.start[1] <= LATE_MS and held(*x.start):
            continue
        out.append((x.arrival, x.late_ms))
    return out


def cpu_times():
    """/proc/stat's first line: (busy, steal) CPU seconds of the whole machine."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, _, _, irq, softirq, steal = ticks[:8]
    return (user + nice + system + irq + softirq) / hz, steal / hz


def calibrate(spec, workdir, nbytes, congestion="cubic"):
    """Run the bulk download over a new path; return (measurements, path
    stats, the disturbance probe). The measurements carry the machine's CPU
    time during the download: `busy_cpu_s`, and `steal_cpu_s`, the time a
    virtual machine's host took its CPUs away (/proc/stat)."""
    with EmulatedPath(spec, workdir) as path:
        busy0, steal0 = cpu_times()
        started = time.monotonic()
        client_pcap, server_pcap = bulk(path, workdir, nbytes, congestion)
        busy1, steal1 = cpu_times()
        wall = time.monotonic() - started
    m = measure(spec, client_pcap, server_pcap, path.deliveries)
    m.update(wall_s=wall, busy_cpu_s=busy1 - busy0, steal_cpu_s=steal1 - steal0,
             cpus=os.cpu_count())
    return m, path.stats, path.probe
