"""An emulated wide-area path between two network namespaces.

Strategy: each namespace gets a TUN device; one forwarder process holds both
devices' file descriptors and moves every IP packet across in user space.
What happens to a packet is decided per direction by the model in this
module -- `Link`, a pure object that is given the time (`now`) instead of
reading a clock: a seeded Bernoulli (or Gilbert-Elliott) loss, then an
optional bottleneck (serialisation at `rate_mbps` behind a tail-drop queue
of `queue_bytes`, or a token bucket that first lets `bucket_bytes` more
through at once), then the one-way delay and jitter; and `ScriptedLoss`,
chosen segments dropped by sequence number.

The forwarder that runs is forwarder.c, the same model written in C so that
a path of hundreds of Mbit/s keeps its schedule (this model run in Python
kept up with about 40 Mbit/s): its draws come from the same generator
(`Rng`) in the same order and its times from the same double-precision
expressions, so both decide the same for every packet (tests/test_forwarder.py
holds them to it). It is compiled once per version of its source
(`forwarder_binary`). It logs every dropped packet (JSON lines: time,
direction, reason, IP and TCP identifiers) and every forwarded one (when it
was read, when it was written, how late against its schedule), and counts
late packets, so a test can tell whether the emulator kept up and by how
much it did not.

Addresses: client 198.18.0.1, server 198.19.0.1 (RFC 2544's benchmarking
range), each reaching the other's /16 through its TUN device `tk0`.
"""

import json
import os
import signal
import struct
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field

from . import netns
from .disturbance import Probe

CLIENT_ADDR = "198.18.0.1"
SERVER_ADDR = "198.19.0.1"
DEVICE = "tk0"
MTU = 1500
PR_SET_TIMERSLACK = 29
MASK64 = (1 << 64) - 1


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
    # a token bucket at the bottleneck (as Linux's tbf): after an idle this many
    # bytes more than a packet leave at once, then packets at rate_mbps; 0: a FIFO
    bucket_bytes: int = 0
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


class Rng:
    """splitmix64 (Steele, Lea and Flood 2014): the loss and jitter draws of one
    direction, the same sequence in this model and in forwarder.c.

    `random()` is uniform on [0, 1) with 53 bits, like random.random().
    """

    def __init__(self, state):
        self.state = state & MASK64

    @classmethod
    def for_direction(cls, seed, direction):
        return cls((seed << 1) | (direction == "down"))

    def random(self):
        self.state = z = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
        return (z >> 11) * 2.0 ** -53


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
        self.tokens_at = 0.0  # (a token bucket) its tokens run this far ahead of the clock
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
        if s.rate_mbps and s.bucket_bytes:
            # a packet leaves once the bucket holds its tokens; what waits for
            # them is the queue: the time it takes to drain, at the rate
            backlog = max(0.0, self.busy_until - now) * (s.rate_mbps * 1e6 / 8)
            if backlog > 0.0 and backlog + size > s.queue_bytes:
                return None, "queue"
            serialise = size * 8 / (s.rate_mbps * 1e6)
            leave = max(now, self.tokens_at - s.bucket_bytes * 8 / (s.rate_mbps * 1e6))
            self.tokens_at = max(self.tokens_at, leave) + serialise
            depart = leave + serialise
            self.busy_until = depart
        elif s.rate_mbps:
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


DROP_RECORD = struct.Struct("=BBHIq60s4x")  # forwarder.c's drop_rec
DELIVERY_RECORD = struct.Struct("=BBHIqqqqq60s4x")  # forwarder.c's delivery_rec
REASONS = ("", "loss", "burst_loss", "queue", "scripted", "forwarder_full", "device_refused")
DIRECTIONS = ("up", "down")
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "forwarder.c")


def forwarder_binary():
    """The compiled forwarder (forwarder.c), built once per version of its
    source into the user's cache (`make setup` builds it ahead)."""
    import hashlib
    import shutil
    with open(SOURCE, "rb") as f:
        version = hashlib.sha256(f.read()).hexdigest()[:12]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    binary = os.path.join(base, "tracekit", f"forwarder-{version}")
    if os.path.exists(binary):
        return binary
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise netns.TracekitError("the lab's path forwarder is C and needs a compiler: "
                                  "apt-get install gcc")
    os.makedirs(os.path.dirname(binary), exist_ok=True)
    tmp = f"{binary}.{os.getpid()}"
    r = subprocess.run([cc, "-O2", "-Wall", "-pthread", "-o", tmp, SOURCE],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise netns.TracekitError(f"building {SOURCE} failed: {r.stderr.strip()}")
    os.replace(tmp, binary)
    return binary


def write_config(spec, path):
    """The path's settings as forwarder.c reads them: `direction key value` lines
    (floats as repr, which reads back to the same double)."""
    with open(path, "w") as f:
        for name, d in (("up", spec.up), ("down", spec.down)):
            values = {"delay_ms": d.delay_ms, "loss": d.loss, "jitter_ms": d.jitter_ms,
                      "burst_p": d.burst_p, "burst_r": d.burst_r, "burst_loss": d.burst_loss,
                      "rate_mbps": d.rate_mbps or 0.0, "queue_bytes": d.queue_bytes,
                      "bucket_bytes": d.bucket_bytes,
                      "rng_state": Rng.for_direction(spec.seed, name).state}
            for key, value in values.items():
                integer = key in ("queue_bytes", "bucket_bytes", "rng_state")
                f.write(f"{name} {key} {int(value) if integer else repr(float(value))}\n")
            for rule in d.drop_segments:
                seq, times, *which = rule
                f.write(f"{name} rule {seq} {times} {which[0] if which else -1}\n")


def read_records(base, record, key):
    """Both directions' records (forwarder.c writes BASE.up and BASE.down), in
    time order (`key` picks the time), and the files removed."""
    rows = []
    for direction in DIRECTIONS:
        path = f"{base}.{direction}"
        if os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
            rows.extend(record.iter_unpack(data[:len(data) - len(data) % record.size]))
            os.remove(path)
    return sorted(rows, key=key)


def write_drop_log(binary_path, path):
    """One JSON line per dropped packet: when, which way, why, what it was."""
    with open(path, "w") as f:
        for direction, reason, size, _, t_ns, head in read_records(binary_path, DROP_RECORD,
                                                                   key=lambda r: r[4]):
            f.write(json.dumps({"t_ns": t_ns, "direction": DIRECTIONS[direction],
                                "reason": REASONS[reason], **describe(head[:size]),
                                "bytes": size}) + "\n")


def write_deliveries(binary_path, path):
    """One JSON line per forwarded packet: when it was read, its write begun
    (`sent_ns`) and returned (`done_ns`, the log's flush included), how late it
    was begun, and the deadline of the lane's last sleep before (`slept_to_ns`)."""
    with open(path, "w") as f:
        for direction, _, size, _, read_ns, sent_ns, done_ns, late_ns, slept_to_ns, head in \
                read_records(binary_path, DELIVERY_RECORD, key=lambda r: r[5]):
            f.write(json.dumps({"direction": DIRECTIONS[direction], "read_ns": read_ns,
                                "sent_ns": sent_ns, "done_ns": done_ns, "late_ns": late_ns,
                                "slept_to_ns": slept_to_ns, **describe(head[:size]),
                                "bytes": size}) + "\n")


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
    """Forwarder process: python -m tracekit.lab.wan CLIENT_NS SERVER_NS CONFIG DROPS DELIVERIES STATS.

    Opens the two TUN devices (in their namespaces), takes real-time priority
    and becomes the compiled forwarder, which inherits both.
    """
    client_ns, server_ns, config, drops, deliveries, stats = argv
    binary = forwarder_binary()
    fd_c = netns.open_tun_in(client_ns, DEVICE)
    fd_s = netns.open_tun_in(server_ns, DEVICE)
    _realtime()
    os.set_inheritable(fd_c, True)
    os.set_inheritable(fd_s, True)
    os.execv(binary, [binary, str(fd_c), str(fd_s), config, drops, deliveries, stats])


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
        self.config = os.path.join(workdir, "forwarder.conf")
        self.records = {name: os.path.join(workdir, f".{name}") for name in ("drops", "deliveries")}
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
            forwarder_binary()  # built here, so that a missing compiler is said plainly
            write_config(self.spec, self.config)
            self.forwarder = subprocess.Popen(
                [sys.executable, "-m", "tracekit.lab.wan", self.client_ns, self.server_ns,
                 self.config, self.records["drops"], self.records["deliveries"], self.stats_path],
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
                for binary, write, out in ((self.records["drops"], write_drop_log, self.drop_log),
                                           (self.records["deliveries"], write_deliveries,
                                            self.deliveries)):
                    write(binary, out)
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
    if sys.argv[1:] == ["--build"]:  # `make setup`: compile the forwarder ahead
        print(forwarder_binary())
        sys.exit(0)
    # Ctrl-C is the lab's to handle: it stops this process (SIGTERM) and cleans up
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _serve(sys.argv[1:])
