"""The compiled forwarder (tracekit/lab/forwarder.c) decides what the model in
tracekit.lab.wan decides, packet by packet: the same drops for the same
reasons and the same arrival times to the last bit. Its `--model` mode is
given the packets and their times, so no namespace or clock is involved."""

import random
import struct
import subprocess

import pytest

from tracekit.lab.wan import (
    REASONS,
    Direction,
    Link,
    PathSpec,
    Rng,
    ScriptedLoss,
    forwarder_binary,
    write_config,
)


def tcp(src, sport, dst, dport, seq, flags, payload=0):
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40 + payload, 1, 0, 64, 6, 0,
                     bytes(src), bytes(dst))
    return ip + struct.pack(">HHIIBBHHH", sport, dport, seq, 0, 5 << 4, flags, 65535, 0, 0) \
        + bytes(payload)


def traffic(n, seed):
    """Packets of three connections both ways (SYNs, data, retransmissions,
    pure ACKs), some with a sequence number near 2^32, and UDP; offered in
    bursts faster than the bottleneck, then in gaps longer than its queue."""
    rng = random.Random(seed)
    a, b = (198, 18, 0, 1), (198, 19, 0, 1)
    isn = {0: 1000, 1: 2 ** 32 - 3000, 2: 77}
    next_seq = {c: isn[c] + 1 for c in isn}
    out, now = [], 1000.0
    for c in isn:
        out.append((now, 0, tcp(a, 40000 + c, b, 80, isn[c], 0x02)))
        out.append((now, 1, tcp(b, 80, a, 40000 + c, 5, 0x12)))
    for i in range(n):
        bursting = (i // 300) % 2  # 300 packets at line rate, then 300 spread out
        now += (rng.choice((0.000005, 0.00001, 0.00002)) if bursting
                else rng.choice((0.0001, 0.001, 0.03))) if i % 500 else 0.3
        c = rng.randrange(3)
        kind = rng.random()
        if kind < 0.6:  # server data, sometimes resent from an earlier sequence number
            size = rng.choice((1448, 1448, 1448, 600, 1))
            seq = next_seq[c] if rng.random() > 0.1 else (next_seq[c] - 1448 * rng.randrange(1, 4)) & 0xFFFFFFFF
            next_seq[c] = (next_seq[c] + size) & 0xFFFFFFFF
            out.append((now, 1, tcp(b, 80, a, 40000 + c, seq, 0x18, size)))
        elif kind < 0.95:
            out.append((now, 0, tcp(a, 40000 + c, b, 80, isn[c] + 1, 0x10)))
        else:
            out.append((now, rng.randrange(2), bytes([0x45]) + bytes(rng.randrange(19, 1400))))
    return out


def decide_in_python(spec, packets):
    links = {0: Link(spec.up, Rng.for_direction(spec.seed, "up")),
             1: Link(spec.down, Rng.for_direction(spec.seed, "down"))}
    scripted = {0: ScriptedLoss(spec.up.drop_segments), 1: ScriptedLoss(spec.down.drop_segments)}
    out = []
    for now, d, packet in packets:
        if scripted[d].drop(packet):
            out.append(("scripted", 0.0))
            continue
        arrival, reason = links[d].admit(now, len(packet))
        out.append((reason or "", arrival or 0.0))
    return out


def decide_in_c(spec, packets, tmp_path):
    config = tmp_path / "forwarder.conf"
    write_config(spec, config)
    stdin = b"".join(struct.pack("=dBH", now, d, len(p)) + p for now, d, p in packets)
    r = subprocess.run([forwarder_binary(), "--model", str(config)], input=stdin,
                       capture_output=True, check=True)
    return [(REASONS[reason], arrival) for reason, arrival in struct.iter_unpack("=Bd", r.stdout)]


SPECS = {
    "bernoulli, delay": PathSpec(up=Direction(delay_ms=100), down=Direction(delay_ms=100, loss=0.14)),
    "bottleneck, jitter": PathSpec(
        up=Direction(delay_ms=15, jitter_ms=3),
        down=Direction(delay_ms=25, jitter_ms=2.5, loss=0.036, rate_mbps=333, queue_bytes=60_000),
        seed=9),
    "bursts, scripted": PathSpec(
        up=Direction(delay_ms=5, burst_p=0.02, burst_r=0.3, burst_loss=0.8, loss=0.001,
                     drop_segments=((1, 1),)),
        down=Direction(delay_ms=5, rate_mbps=20, queue_bytes=30_000,
                       drop_segments=((1, 2), (14481, 1, 1), (2 ** 32 - 10, 3, 1))),
        seed=3),
    "token bucket": PathSpec(
        up=Direction(delay_ms=20, rate_mbps=5, queue_bytes=20_000, bucket_bytes=3_000),
        down=Direction(delay_ms=20, loss=0.01, rate_mbps=50, queue_bytes=40_000, bucket_bytes=15_000),
        seed=5),
}


@pytest.mark.parametrize("name", list(SPECS))
def test_forwarder_decides_as_the_model(name, tmp_path):
    spec = SPECS[name]
    packets = traffic(30_000, seed=len(name))
    python, c = decide_in_python(spec, packets), decide_in_c(spec, packets, tmp_path)
    assert len(c) == len(packets)
    reasons = {r for r, _ in python}
    assert len(reasons) >= 2  # something is dropped: the comparison covers both branches
    mismatches = [(i, p, q) for i, (p, q) in enumerate(zip(python, c)) if p != q]
    assert mismatches[:3] == []


def test_every_reason_is_exercised():
    """The cases above between them drop for every reason the model has."""
    seen = set()
    for spec in SPECS.values():
        seen |= {r for r, _ in decide_in_python(spec, traffic(30_000, seed=1))}
    assert seen == {"", "loss", "burst_loss", "queue", "scripted"}


def test_rng_is_splitmix64():
    """The generator's first output against splitmix64's published reference
    value for seed 0 (0xE220A8397B1DCDAF), as a 53-bit fraction."""
    assert Rng(0).random() == (0xE220A8397B1DCDAF >> 11) * 2.0 ** -53
