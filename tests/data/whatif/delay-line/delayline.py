#!/usr/bin/env python3
"""User-space delay line between two TUN devices in two network namespaces.

client ns (tkrtt-c): TUN tkc0 198.18.80.1 peer 198.18.80.2
server ns (tkrtt-s): TUN tks0 198.18.80.2 peer 198.18.80.1

c->s: fixed one-way delay RTT/2.
s->c: serialised at RATE bit/s through a drop-tail queue of QUEUE bytes
      (departure = max(arrival, previous departure) + size*8/rate; dropped if
      the not-yet-departed backlog plus this packet would exceed QUEUE), then
      delivered RTT/2 after its departure.
      With --loss P, each data-bearing (payload > 0, not SYN) TCP packet s->c
      is first dropped with probability P (random.Random(--seed)), before the
      queue. Every drop (reason "random" or "queue") is logged as a JSON line
      to --drop-log (written at exit).
      With --ge-p-gb > 0 (set 18): a Gilbert-Elliott bursty loss on the same
      candidates (data-bearing TCP s->c, not SYN), before the queue and after
      the random loss: a two-state chain (Good/Bad) stepped once per
      candidate (G->B with --ge-p-gb, B->G with --ge-p-bg), then the
      candidate dropped with --ge-loss-bad in Bad, --ge-loss-good in Good;
      seeded with its own random.Random(--seed + 1000003); such drops are
      logged with reason "burst" (and the chain's state).

Prints READY on stdout once both TUNs are up and configured; runs until
SIGINT/SIGTERM; prints counters (incl. drops) and timing lateness to stderr
at exit.
"""
import argparse
import collections
import ctypes
import fcntl
import gc
import json
import os
import random
import socket
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


def parse(pkt):
    """IPv4/TCP header fields of a raw packet (no PI header)."""
    d = {}
    if len(pkt) < 20 or pkt[0] >> 4 != 4:
        return dict(ip_len=len(pkt), proto=None, payload_len=len(pkt), tcp_flags=0)
    ihl = (pkt[0] & 15) * 4
    ip_len = struct.unpack_from("!H", pkt, 2)[0]
    d.update(ip_len=ip_len, src=socket.inet_ntoa(pkt[12:16]),
             dst=socket.inet_ntoa(pkt[16:20]), proto=pkt[9])
    if pkt[9] == 6 and len(pkt) >= ihl + 20:
        sport, dport, seq, ack, off, flags = struct.unpack_from("!HHIIBB", pkt, ihl)
        d.update(sport=sport, dport=dport, seq=seq, ack=ack,
                 payload_len=ip_len - ihl - (off >> 4) * 4, tcp_flags=flags)
    else:
        d.update(payload_len=ip_len - ihl, tcp_flags=0)
    return d


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


def _order(d, backlog, h):
    """Fields in the order of the earlier logs: time, direction, reason,
    ip_len, backlog, src, dst, proto, sport, dport, seq, ack, payload_len,
    tcp_flags."""
    out = dict(d)
    out["ip_len"] = h.get("ip_len")
    out["backlog"] = backlog
    for k in ("src", "dst", "proto", "sport", "dport", "seq", "ack",
              "payload_len", "tcp_flags"):
        if k in h:
            out[k] = h[k]
    return out


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
    ap.add_argument("--loss", type=float, default=0.0,
                    help="random drop probability, s->c data segments, before the queue")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random drops")
    ap.add_argument("--drop-log", default=None, help="JSON-lines file of every drop")
    ap.add_argument("--ge-p-gb", type=float, default=0.0, help="Gilbert-Elliott p(Good->Bad) per candidate")
    ap.add_argument("--ge-p-bg", type=float, default=0.3, help="Gilbert-Elliott p(Bad->Good) per candidate")
    ap.add_argument("--ge-loss-bad", type=float, default=0.8, help="drop probability in Bad")
    ap.add_argument("--ge-loss-good", type=float, default=0.0, help="drop probability in Good")
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
    loss = a.loss
    rng = random.Random(a.seed)
    ge_on = a.ge_p_gb > 0.0
    ge_rng = random.Random(a.seed + 1000003)
    ge_bad = False
    ge_pgb, ge_pbg, ge_lb, ge_lg = a.ge_p_gb, a.ge_p_bg, a.ge_loss_bad, a.ge_loss_good
    drops = []  # (wall time, reason, backlog, pkt) -- parsed and written at exit

    to_s = collections.deque()      # (due, pkt) c->s
    to_c = collections.deque()      # (due, pkt) s->c
    inq = collections.deque()       # (departure, size) s->c not yet departed
    backlog = 0
    last_dep = 0.0
    st = dict(c2s_pkts=0, c2s_bytes=0, s2c_pkts=0, s2c_bytes=0,
              s2c_drops=0, s2c_drop_bytes=0, write_err=0, max_backlog=0,
              s2c_drops_queue=0, s2c_drops_random=0, loss_candidates=0,
              s2c_drops_burst=0, ge_bad_steps=0, ge_bad_entries=0)
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
                    if (loss > 0.0 or ge_on) and n >= 40 and pkt[0] == 0x45 and pkt[9] == 6:
                        # candidate: TCP with payload, not SYN/SYN-ACK
                        tl = (pkt[0] & 15) * 4
                        plen = ((pkt[2] << 8) | pkt[3]) - tl - (pkt[tl + 12] >> 4) * 4
                        if plen > 0 and not (pkt[tl + 13] & 2):
                            st["loss_candidates"] += 1
                            if loss > 0.0 and rng.random() < loss:
                                st["s2c_drops"] += 1
                                st["s2c_drops_random"] += 1
                                st["s2c_drop_bytes"] += n
                                drops.append((time.time(), "random", backlog, pkt))
                                continue
                            if ge_on:
                                if ge_bad:
                                    if ge_rng.random() < ge_pbg:
                                        ge_bad = False
                                elif ge_rng.random() < ge_pgb:
                                    ge_bad = True
                                    st["ge_bad_entries"] += 1
                                if ge_bad:
                                    st["ge_bad_steps"] += 1
                                if ge_rng.random() < (ge_lb if ge_bad else ge_lg):
                                    st["s2c_drops"] += 1
                                    st["s2c_drops_burst"] += 1
                                    st["s2c_drop_bytes"] += n
                                    drops.append((time.time(), "burst", backlog, pkt))
                                    continue
                    if backlog + n > qlimit:
                        st["s2c_drops"] += 1
                        st["s2c_drops_queue"] += 1
                        st["s2c_drop_bytes"] += n
                        drops.append((time.time(), "queue", backlog, pkt))
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
    if a.drop_log:
        with open(a.drop_log, "w") as f:
            for wt, reason, bl, pkt in drops:
                d = dict(time=round(wt, 6), direction="s2c", reason=reason)
                f.write(json.dumps(_order(d, bl, parse(pkt))) + "\n")
    st["late_mean_us"] = round(1e6 * late_sum / late_n, 1) if late_n else 0
    st["late_max_us"] = round(1e6 * late_max, 1)
    st["late_over_1ms"] = late_over_1ms
    st["late_over_500us"] = late_over_500us
    st["delivered"] = late_n
    st["late_events_ms"] = late_events
    st["undelivered_at_exit"] = len(to_s) + len(to_c)
    print("delayline rtt=%gms rate=%g queue=%d loss=%g ge=%g/%g/%g/%g seed=%d drops=%d stats=%s" % (
        a.rtt, a.rate, a.queue, a.loss, a.ge_p_gb, a.ge_p_bg, a.ge_loss_bad, a.ge_loss_good,
        a.seed, st["s2c_drops"], st),
        file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
