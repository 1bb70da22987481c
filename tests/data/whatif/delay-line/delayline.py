#!/usr/bin/env python3
"""User-space delay line between two TUN devices in two network namespaces.

client ns (tkrtt-c): TUN tkc0 198.18.80.1 peer 198.18.80.2
server ns (tkrtt-s): TUN tks0 198.18.80.2 peer 198.18.80.1

c->s: fixed one-way delay RTT/2.
s->c: serialised at RATE bit/s through a drop-tail queue of QUEUE bytes
      (departure = max(arrival, previous departure) + size*8/rate; dropped if
      the not-yet-departed backlog plus this packet would exceed QUEUE), then
      delivered RTT/2 after its departure.

Prints READY on stdout once both TUNs are up and configured; runs until
SIGINT/SIGTERM; prints counters (incl. drops) and timing lateness to stderr
at exit.
"""
import argparse
import collections
import ctypes
import fcntl
import gc
import os
import select
import signal
import struct
import subprocess
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
PR_SET_TIMERSLACK = 29

libc = ctypes.CDLL(None, use_errno=True)


def setns(fd):
    if libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "setns: " + os.strerror(e))


def open_tun_in_ns(ns, name):
    """Enter netns `ns`, create TUN `name` there, return to the original netns."""
    orig = os.open("/proc/self/ns/net", os.O_RDONLY)
    nsfd = os.open("/var/run/netns/" + ns, os.O_RDONLY)
    try:
        setns(nsfd)
        try:
            fd = os.open("/dev/net/tun", os.O_RDWR)
            ifr = struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI)
            fcntl.ioctl(fd, TUNSETIFF, ifr)
        finally:
            setns(orig)
    finally:
        os.close(nsfd)
        os.close(orig)
    os.set_blocking(fd, False)
    return fd


def sh(*args):
    subprocess.run(list(args), check=True)


def configure(ns, dev, local, peer, mtu):
    sh("ip", "-n", ns, "link", "set", "dev", dev, "mtu", str(mtu))
    sh("ip", "-n", ns, "addr", "add", local, "peer", peer, "dev", dev)
    sh("ip", "-n", ns, "link", "set", "dev", dev, "up")
    # offloads: best effort
    subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-K", dev,
                    "tso", "off", "gso", "off", "gro", "off"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rtt", type=float, required=True, help="round trip in ms")
    ap.add_argument("--rate", type=float, default=20e6, help="s->c bit/s")
    ap.add_argument("--queue", type=int, default=100_000, help="s->c queue bytes")
    ap.add_argument("--cns", default="tkrtt-c")
    ap.add_argument("--sns", default="tkrtt-s")
    ap.add_argument("--cdev", default="tkc0")
    ap.add_argument("--sdev", default="tks0")
    ap.add_argument("--caddr", default="198.18.80.1")
    ap.add_argument("--saddr", default="198.18.80.2")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--rt", action="store_true", help="try SCHED_FIFO")
    a = ap.parse_args()

    libc.prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)  # 1 us timer slack
    cfd = open_tun_in_ns(a.cns, a.cdev)
    sfd = open_tun_in_ns(a.sns, a.sdev)
    configure(a.cns, a.cdev, a.caddr, a.saddr, a.mtu)
    configure(a.sns, a.sdev, a.saddr, a.caddr, a.mtu)
    if a.rt:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(20))
        except OSError as e:
            print("delayline: SCHED_FIFO failed: %s" % e, file=sys.stderr)

    stop = False

    def on_sig(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_sig)
    signal.signal(signal.SIGTERM, on_sig)

    now = time.perf_counter
    delay = a.rtt / 2000.0
    sec_per_bit = 1.0 / a.rate
    qlimit = a.queue

    to_s = collections.deque()      # (due, pkt) c->s
    to_c = collections.deque()      # (due, pkt) s->c
    inq = collections.deque()       # (departure, size) s->c not yet departed
    backlog = 0
    last_dep = 0.0
    st = dict(c2s_pkts=0, c2s_bytes=0, s2c_pkts=0, s2c_bytes=0,
              s2c_drops=0, s2c_drop_bytes=0, write_err=0, max_backlog=0)
    late_max = 0.0
    late_sum = 0.0
    late_n = 0
    late_over_1ms = 0
    late_over_500us = 0

    late_events = []  # (due time since start s, lateness ms) of first >1 ms lates
    gc.collect()
    gc.disable()  # avoid collector pauses in the packet loop (no ref cycles made)
    try:
        libc.mlockall(3)  # MCL_CURRENT|MCL_FUTURE, best effort
    except Exception:
        pass
    t_start = now()
    print("READY", flush=True)
    BATCH = 16
    while not stop:
        t = now()
        # deliver everything due
        for q, fd in ((to_s, sfd), (to_c, cfd)):
            while q and q[0][0] <= t:
                due, pkt = q.popleft()
                try:
                    os.write(fd, pkt)
                except OSError:
                    st["write_err"] += 1
                late = now() - due  # measured after the write
                late_sum += late
                late_n += 1
                if late > late_max:
                    late_max = late
                if late > 0.001:
                    late_over_1ms += 1
                    if len(late_events) < 20:
                        late_events.append((round(due - t_start, 4), round(late * 1e3, 2)))
                if late > 0.0005:
                    late_over_500us += 1
        nxt = None
        for q in (to_s, to_c):
            if q and (nxt is None or q[0][0] < nxt):
                nxt = q[0][0]
        timeout = None if nxt is None else max(0.0, nxt - now())
        if timeout is None:
            timeout = 0.5  # wake periodically so signals are noticed
        try:
            r, _, _ = select.select([cfd, sfd], [], [], timeout)
        except InterruptedError:
            continue
        for fd in r:
            for _ in range(BATCH):
                try:
                    pkt = os.read(fd, 65536)
                except BlockingIOError:
                    break
                t = now()
                n = len(pkt)
                if fd == cfd:
                    st["c2s_pkts"] += 1
                    st["c2s_bytes"] += n
                    to_s.append((t + delay, pkt))
                else:
                    while inq and inq[0][0] <= t:
                        backlog -= inq.popleft()[1]
                    if backlog + n > qlimit:
                        st["s2c_drops"] += 1
                        st["s2c_drop_bytes"] += n
                        continue
                    dep = max(t, last_dep) + n * 8 * sec_per_bit
                    last_dep = dep
                    inq.append((dep, n))
                    backlog += n
                    if backlog > st["max_backlog"]:
                        st["max_backlog"] = backlog
                    st["s2c_pkts"] += 1
                    st["s2c_bytes"] += n
                    to_c.append((dep + delay, pkt))

    os.close(cfd)
    os.close(sfd)
    st["late_mean_us"] = round(1e6 * late_sum / late_n, 1) if late_n else 0
    st["late_max_us"] = round(1e6 * late_max, 1)
    st["late_over_1ms"] = late_over_1ms
    st["late_over_500us"] = late_over_500us
    st["delivered"] = late_n
    st["late_events_ms"] = late_events
    st["undelivered_at_exit"] = len(to_s) + len(to_c)
    print("delayline rtt=%gms rate=%g queue=%d drops=%d stats=%s" % (
        a.rtt, a.rate, a.queue, st["s2c_drops"], st), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
