"""An emulated wide-area path between two network namespaces.

Strategy: each namespace gets a TUN device; one forwarder process holds both
devices' file descriptors and moves every IP packet across in user space.
What happens to a packet is decided by `Link` (one per direction), a pure
object that is given the time (`now`) instead of reading a clock: a seeded
Bernoulli loss, then an optional bottleneck (serialisation at `rate_mbps`
behind a tail-drop queue of `queue_bytes`), then the one-way delay. The
forwarder logs every dropped packet (JSON lines: time, direction, reason,
IP and TCP identifiers) and every forwarded one (when it was read, when it
was written, how late against its schedule), and counts late packets, so a
test can tell whether the emulator kept up and by how much it did not.

Addresses: client 198.18.0.1, server 198.19.0.1 (RFC 2544's benchmarking
range), each reaching the other's /16 through its TUN device `tk0`.
"""

import gc
import heapq
import json
import os
import random
import select
import signal
import struct
import subprocess
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field

from . import netns
from .disturbance import Probe

CLIENT_ADDR = "198.18.0.1"
SERVER_ADDR = "198.19.0.1"
DEVICE = "tk0"
MTU = 1500
READ_BURST = 8
SPIN_S = 0.002  # poll instead of sleeping when the next packet is due this soon
PR_SET_TIMERSLACK = 29
HEAD = 60  # bytes of each forwarded packet kept for the delivery log


@dataclass(frozen=True)
class Direction:
    """What the path does to packets going one way."""

    delay_ms: float = 0.0
    loss: float = 0.0  # probability that a packet is dropped (Bernoulli; the good state's)
    # jitter: each packet waits an extra uniform [0, jitter_ms), never
    # overtaking the one before it (a path that delays, not one that reorders)
    jitter_ms: float = 0.0
    # Gilbert-Elliott burst loss: per packet, good -> bad with probability
    # burst_p, bad -> good with burst_r; in the bad state a packet is lost
    # with burst_loss. Mean loss = (burst_p * burst_loss + burst_r * loss) /
    # (burst_p + burst_r); mean burst length 1 / burst_r packets. 0: off.
    burst_p: float = 0.0
    burst_r: float = 1.0
    burst_loss: float = 1.0
    rate_mbps: float | None = None  # bottleneck rate (Mbit/s = 1e6 bit/s); None: unlimited
    queue_bytes: int = 256_000  # bottleneck queue (tail drop)
    # scripted loss: ((relative seq, times), ...) drops the first `times`
    # transmissions of the TCP data that carries the byte at that relative
    # sequence number (data starts at 1), in every connection; (relative
    # seq, times, n) only in the n-th connection (from 0)
    drop_segments: tuple = ()


@dataclass(frozen=True)
class PathSpec:
    up: Direction = field(default_factory=Direction)  # client -> server
    down: Direction = field(default_factory=Direction)  # server -> client
    seed: int = 1

    @classmethod
    def from_dict(cls, d):
        def direction(x):
            return Direction(**{**x, "drop_segments": tuple(map(tuple, x.get("drop_segments", ())))})
        return cls(up=direction(d["up"]), down=direction(d["down"]), seed=d["seed"])


class ScriptedLoss:
    """Drops chosen TCP segments by relative sequence number (Direction.drop_segments).

    A rule is (relative seq, times) for every connection, or (relative seq,
    times, connection) for the connection-th one (from 0, in the order their
    first SYN or SYN-ACK passed this way). It drops the first `times`
    transmissions of data that carry the byte at that relative sequence
    number, wherever the sender's segment boundaries fall (a window-limited
    sender can shift them by sending a short segment).
    """

    def __init__(self, rules):
        self.rules = []
        for rule in rules:
            seq, times, *which = rule
            self.rules.append((seq, times, which[0] if which else None))
        self.isn = {}  # (src, sport, dst, dport) -> (initial sequence number, connection)
        self.sent = {}  # (connection, rule's relative seq) -> transmissions seen

    def drop(self, packet):
        if not self.rules or len(packet) < 40 or packet[0] >> 4 != 4 or packet[9] != 6:
            return False
        ihl = (packet[0] & 0x0F) * 4
        sport, dport, seq = struct.unpack(">HHI", packet[ihl:ihl + 8])
        key = (packet[12:16], sport, packet[16:20], dport)
        if packet[ihl + 13] & 0x02:  # SYN
            if key not in self.isn or self.isn[key][0] != seq:
                self.isn[key] = (seq, len(self.isn))
            return False
        if key not in self.isn:
            return False
        isn, ordinal = self.isn[key]
        rel = (seq - isn) & 0xFFFFFFFF
        total = struct.unpack(">H", packet[2:4])[0]
        length = total - ihl - (packet[ihl + 12] >> 4) * 4
        if length <= 0:
            return False
        for target, times, which in self.rules:
            if (which is None or which == ordinal) and rel <= target < rel + length:
                seen = self.sent.get((key, target), 0)
                self.sent[(key, target)] = seen + 1
                return seen < times
        return False


class Link:
    """One direction of the path: when each packet arrives, or why it never does."""

    def __init__(self, spec, rng):
        self.spec = spec
        self.rng = rng
        self.busy_until = 0.0  # when the bottleneck finishes sending what it holds
        self.in_queue = deque()  # (departure time, size) of packets still queued
        self.queued_bytes = 0
        self.bad = False  # Gilbert-Elliott state
        self.last_arrival = 0.0

    def admit(self, now, size):
        """Return (arrival time, None) or (None, reason) for a packet seen at `now` (s)."""
        s = self.spec
        if s.burst_p:
            if self.bad:
                self.bad = self.rng.random() >= s.burst_r
            else:
                self.bad = self.rng.random() < s.burst_p
        loss = s.burst_loss if self.bad else s.loss
        if loss and self.rng.random() < loss:
            return None, "burst_loss" if self.bad else "loss"
        depart = now
        if s.rate_mbps:
            while self.in_queue and self.in_queue[0][0] <= now:
                self.queued_bytes -= self.in_queue.popleft()[1]
            if self.queued_bytes + size > s.queue_bytes:
                return None, "queue"
            depart = max(now, self.busy_until) + size * 8 / (s.rate_mbps * 1e6)
            self.busy_until = depart
            self.in_queue.append((depart, size))
            self.queued_bytes += size
        arrival = depart + s.delay_ms / 1000.0
        if s.jitter_ms:
            arrival = max(arrival + self.rng.random() * s.jitter_ms / 1000.0, self.last_arrival)
            self.last_arrival = arrival
        return arrival, None


def describe(packet):
    """IP/TCP/UDP identifiers of a raw IPv4 packet, for the drop log."""
    out = {"bytes": len(packet)}
    if len(packet) < 20 or packet[0] >> 4 != 4:
        return out
    ihl = (packet[0] & 0x0F) * 4
    total, ident, _, _, proto = struct.unpack(">HHHBB", packet[2:10])
    out.update(ip_id=ident, protocol=proto,
               src=".".join(map(str, packet[12:16])), dst=".".join(map(str, packet[16:20])))
    l4 = packet[ihl:]
    if proto in (6, 17) and len(l4) >= 4:
        out["src_port"], out["dst_port"] = struct.unpack(">HH", l4[:4])
    if proto == 6 and len(l4) >= 20:
        seq, ack = struct.unpack(">II", l4[4:12])
        doff = (l4[12] >> 4) * 4
        out.update(tcp_seq=seq, tcp_ack=ack, tcp_flags=l4[13] | ((l4[12] & 1) << 8),
                   payload_bytes=total - ihl - doff)
    return out


def forward(fd_client, fd_server, spec, log, deliveries=None, clock=time.monotonic,
            wall=time.time_ns):
    """Move packets between the two TUN fds until SIGTERM; return statistics.

    `deliveries`, if given, receives one tuple per forwarded packet:
    (direction, wall ns when read, wall ns when handed to the write, ns late,
    first bytes).
    """
    links = {"up": Link(spec.up, random.Random(f"{spec.seed}/up")),
             "down": Link(spec.down, random.Random(f"{spec.seed}/down"))}
    scripted = {"up": ScriptedLoss(spec.up.drop_segments),
                "down": ScriptedLoss(spec.down.drop_segments)}
    route = {fd_client: ("up", fd_server), fd_server: ("down", fd_client)}
    fds = [fd_client, fd_server]
    heap = []
    seq = 0
    stats = {"forwarded": {"up": 0, "down": 0}, "dropped": {"up": {}, "down": {}},
             "late_over_0_2ms": 0, "late_over_1ms": 0, "max_late_ms": 0.0}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        # sleep until SPIN_S before the next packet is due, then poll without
        # sleeping: waking from a timed sleep can take far longer than a
        # packet's schedule allows on a busy machine
        wait = heap[0][0] - clock() if heap else 0.2
        timeout = 0.0 if wait < SPIN_S else min(0.2, wait - SPIN_S)
        try:
            readable, _, _ = select.select(fds, [], [], timeout)
        except InterruptedError:
            continue
        for fd in readable:
            direction, out = route[fd]
            for _ in range(READ_BURST):  # then deliver what is due before reading more
                try:
                    packet = os.read(fd, 65535)
                except BlockingIOError:
                    break
                read_ns = wall()
                if scripted[direction].drop(packet):
                    arrive, reason = None, "scripted"
                else:
                    arrive, reason = links[direction].admit(clock(), len(packet))
                if reason:
                    counts = stats["dropped"][direction]
                    counts[reason] = counts.get(reason, 0) + 1
                    log.write(json.dumps({"t_ns": read_ns, "direction": direction,
                                          "reason": reason, **describe(packet)}) + "\n")
                    continue
                heapq.heappush(heap, (arrive, seq, out, packet, direction, read_ns))
                seq += 1
        now = clock()
        while heap and heap[0][0] <= now:
            due, _, out, packet, direction, read_ns = heapq.heappop(heap)
            late = (now - due) * 1000.0
            if late > 0.2:
                stats["late_over_0_2ms"] += 1
                if late > 1.0:
                    stats["late_over_1ms"] += 1
            stats["max_late_ms"] = max(stats["max_late_ms"], late)
            sent_ns = wall()
            try:
                os.write(out, packet)
            except OSError:  # the device's queue is full: the kernel drops it there
                continue
            stats["forwarded"][direction] += 1
            if deliveries is not None:
                deliveries.append((direction, read_ns, sent_ns, int(late * 1e6), packet[:HEAD]))
            now = clock()
    log.flush()
    return stats


def write_deliveries(deliveries, path):
    """One JSON line per forwarded packet: when it was read and written, how late."""
    with open(path, "w") as f:
        for direction, read_ns, sent_ns, late_ns, head in deliveries:
            f.write(json.dumps({"direction": direction, "read_ns": read_ns, "sent_ns": sent_ns,
                                "late_ns": late_ns, **describe(head)}) + "\n")


def _realtime():
    """Run before the programs the forwarder carries packets for; True if allowed."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (OSError, AttributeError):
        try:
            os.setpriority(os.PRIO_PROCESS, 0, -20)
        except OSError:
            pass
        netns.libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)  # wake on time, not up to 50 us late
        return False
    return True


def _serve(argv):
    """Forwarder process: python -m tracekit.lab.wan CLIENT_NS SERVER_NS SPEC LOG DELIVERIES STATS."""
    client_ns, server_ns, spec_json, log_path, deliveries_path, stats_path = argv
    spec = PathSpec.from_dict(json.loads(spec_json))
    fd_c = netns.open_tun_in(client_ns, DEVICE)
    fd_s = netns.open_tun_in(server_ns, DEVICE)
    gc.disable()  # the loop makes no reference cycles: never pause to collect
    realtime = _realtime()
    print("ready", flush=True)
    deliveries = []
    with open(log_path, "w") as log:
        stats = forward(fd_c, fd_s, spec, log, deliveries)
    stats["realtime"] = realtime
    write_deliveries(deliveries, deliveries_path)
    with open(stats_path, "w") as f:
        json.dump(stats, f)


class EmulatedPath:
    """Two namespaces joined by the forwarder; a context manager that cleans up.

        with EmulatedPath(PathSpec(up=Direction(10), down=Direction(10)), workdir) as path:
            subprocess.run(path.client(["curl", f"http://{SERVER_ADDR}/"]))
    """

    count = 0

    def __init__(self, spec, workdir):
        EmulatedPath.count += 1
        tag = f"{os.getpid()}-{EmulatedPath.count}"
        self.tag = tag
        self.spec = spec
        self.client_ns = f"{netns.PREFIX}c{tag}"
        self.server_ns = f"{netns.PREFIX}s{tag}"
        self.drop_log = os.path.join(workdir, "drops.jsonl")
        self.deliveries = os.path.join(workdir, "deliveries.jsonl")
        self.stats_path = os.path.join(workdir, "forwarder.json")
        self.forwarder = None
        self.stats = None
        self.probe = Probe(workdir)  # how long the machine took the CPU from the lab

    def client(self, cmd):
        """`cmd` run in the client's namespace (at the lab's real-time priority)."""
        return netns.in_ns_realtime(self.client_ns, *cmd)

    def server(self, cmd):
        return netns.in_ns_realtime(self.server_ns, *cmd)

    def _record(self):
        me = os.getpid()
        record = {"owner_pid": me, "owner_start": netns.start_time(me), "uid": os.getuid(),
                  "namespaces": [self.client_ns, self.server_ns], "forwarder_pid": None,
                  "forwarder_start": None, "started": time.time()}
        if self.forwarder is not None:
            record["forwarder_pid"] = self.forwarder.pid
            record["forwarder_start"] = netns.start_time(self.forwarder.pid)
        netns.write_record(self.tag, record)

    def __enter__(self):
        netns.require_root()
        try:
            self._record()  # before anything is made: a crash leaves a record of it
            netns.add(self.client_ns)
            netns.add(self.server_ns)
            self.probe.__enter__()
            self.forwarder = subprocess.Popen(
                [sys.executable, "-m", "tracekit.lab.wan", self.client_ns, self.server_ns,
                 json.dumps(asdict(self.spec)), self.drop_log, self.deliveries, self.stats_path],
                stdout=subprocess.PIPE, text=True)
            self._record()
            if self.forwarder.stdout.readline().strip() != "ready":
                raise netns.TracekitError("the path forwarder did not start")
            for ns, mine, peer in ((self.client_ns, CLIENT_ADDR, SERVER_ADDR),
                                   (self.server_ns, SERVER_ADDR, CLIENT_ADDR)):
                netns.run(*netns.in_ns(ns, "ip", "addr", "add", f"{mine}/32", "dev", DEVICE))
                netns.run(*netns.in_ns(ns, "ip", "link", "set", DEVICE, "mtu", str(MTU), "up"))
                netns.run(*netns.in_ns(ns, "ip", "route", "add", peer.rsplit(".", 2)[0] + ".0.0/16",
                                       "dev", DEVICE, "src", mine))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        # a second Ctrl-C must not cut the cleanup short: it waits until the end
        import threading
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            if self.forwarder is not None:
                netns.stop(self.forwarder)
                self.forwarder.stdout.close()
                if os.path.exists(self.stats_path):
                    with open(self.stats_path) as f:
                        self.stats = json.load(f)
            self.probe.__exit__(None, None, None)
            if self.stats is not None:
                self.stats["machine"] = self.probe.summary()
            netns.delete(self.client_ns)
            netns.delete(self.server_ns)
            netns.remove_record(self.tag)
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)
        return False


if __name__ == "__main__":
    # Ctrl-C is the lab's to handle: it stops this process (SIGTERM) and cleans up
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _serve(sys.argv[1:])
