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
import os
import statistics
import subprocess
import sys
import time

from ..errors import TracekitError
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


def measure(spec, client_pcap, server_pcap):
    """The path's rate and one-way delays as the two captures saw them."""
    client, server = packets(client_pcap), packets(server_pcap)
    down_src = SERVER_ADDR
    # upstream: every packet matched by IP id, sequence and acknowledgement numbers
    sent_up = {key: t for t, src, key, _, _ in client if src != down_src}
    up_delay = spec.up.delay_ms
    up = [(t, (t - sent_up[key]) * 1e3 - up_delay) for t, src, key, _, _ in server
          if src != down_src and key in sent_up]
    # downstream: the model's schedule from the server's capture, for what arrived
    # (what arrived was admitted: the replay's queue never refuses it)
    arrived = {key: t for t, src, key, _, _ in client if src == down_src}
    link = Link(dataclasses.replace(spec.down, loss=0.0, jitter_ms=0.0, burst_p=0.0,
                                    queue_bytes=1 << 62), Rng(0))
    down_error, runs, start = [], [[]], (0.0, 0.0)
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
            # (arrival, ms late, and the same of the packet that began its busy stretch)
            down_error.append((arrived[key], late, *start))
            runs[-1].append((arrived[key], length))
    # rate: the longest stretch in which, by the schedule, the bottleneck never
    # idled, timed at the client's end
    busy = max(runs, key=len)
    span = busy[-1][0] - busy[0][0] if busy else 0.0
    rate = sum(length for _, length in busy[1:]) * 8 / span / 1e6 if span > 0 else 0.0
    return {"rate_mbps": rate, "busy_s": span, "busy_packets": len(busy),
            "up_error_ms": summary(sorted(e for _, e in up)),
            "down_error_ms": summary(sorted(x[1] for x in down_error)),
            "packets": {"client": len(client), "server": len(server)},
            # every packet more than 0.5 ms late: (arrival s, ms after its
            # schedule), downstream also the same of its busy stretch's first
            "late": {"up": [x for x in up if x[1] > LATE_MS],
                     "down": [x for x in down_error if x[1] > LATE_MS]}}


def summary(values):
    if not values:
        return {}
    def q(p):
        return values[min(len(values) - 1, int(p * len(values)))]
    return {"n": len(values), "min": values[0], "median": statistics.median(values),
            "p99": q(0.99), "p999": q(0.999), "max": values[-1]}


CATCH_UP = 4  # a lane kept from its CPU for A ms is behind for up to 4 A ms more (at 80 % busy)


def unexplained(late, probe):
    """The late packets (arrival s, ms late) that no disturbance explains.

    A packet due while the probe saw the machine away (a late wake-up from
    `start` to `end`, on any CPU) or while the forwarder was catching up
    afterwards (until end + CATCH_UP x (end - start)) is explained: its
    lateness is the machine's, not the emulator's. So is a packet that
    queued behind the start of a busy stretch that came late for such a
    reason, when it is no later than that start (+ 0.5 ms): the bottleneck
    serves from when the stretch really began.
    """
    away = sorted((s + PERIOD_NS, w) for _, s, w in probe.late)
    starts = [start for start, _ in away]
    # the latest end of catch-up among the spells that began by each start
    reach = list(itertools.accumulate((end + CATCH_UP * (end - start) for start, end in away),
                                      max))

    def held(arrival, late_ms):
        due_ns, arrival_ns = (arrival - late_ms / 1e3) * 1e9, arrival * 1e9
        began = bisect.bisect_right(starts, arrival_ns)  # spells that began before it arrived
        return began > 0 and reach[began - 1] >= due_ns

    out = []
    for arrival, late_ms, *stretch in late:
        if held(arrival, late_ms):
            continue
        # a packet that queued behind a late start is as late as that start:
        # explained with it, if that is all its lateness
        if stretch and late_ms - stretch[1] <= LATE_MS and held(*stretch):
            continue
        out.append((arrival, late_ms))
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
    m = measure(spec, client_pcap, server_pcap)
    m.update(wall_s=wall, busy_cpu_s=busy1 - busy0, steal_cpu_s=steal1 - steal0,
             cpus=os.cpu_count())
    return m, path.stats, path.probe
