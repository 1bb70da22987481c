"""A replay of a response through kcptun (KCP over UDP, Reed-Solomon FEC),
packet by packet, many draws.

The response is cut into KCP segments of `segment` bytes on the wire
(KCP_HEADER and, with FEC, FEC_HEADER of them are not payload) and sent at
the bottleneck rate with `parity` repair packets after every `data`
segments (kcptun's encoder). Each packet is lost independently with
`loss`. A group delivers all its data when at least `data` of its
`data + parity` packets arrive; else its lost data segments are lost.
kcptun's ARQ (mode fast3: fast resend once two later segments are
acknowledged, else the RTO; a 10 ms flush interval) sends them again a
round later, `rtt + interval` after the round's packets left, encoded in
new groups (a last partial group has no parity: the encoder emits it only
once `data` segments are in). The transfer ends when the last segment is
delivered.
"""

import math

import numpy as np

from ..lab.tunnel import DATA_SHARDS, GROUP_SURVIVAL, SEGMENT  # the lab's kcptun settings
from ..core.model import fec_repair_symbols

KCP_HEADER = 24
FEC_HEADER = 8       # kcptun: 6 bytes of FEC header and 2 of size on data shards
UDP_IP = 28
INTERVAL = 0.010     # kcptun fast3: the KCP flush interval


def sizing(path, loss):
    """(data, parity) shards of the lab's `tunnel` (FEC sized so that a group
    of DATA_SHARDS survives `loss` with GROUP_SURVIVAL: tunnel.sized_for) and
    `tunnel-arq` (none)."""
    if path == "tunnel-arq":
        return 0, 0
    return DATA_SHARDS, fec_repair_symbols(DATA_SHARDS, loss, GROUP_SURVIVAL)


def payload(segment, fec):
    return segment - KCP_HEADER - (FEC_HEADER if fec else 0)


def _round(pending, data, parity, loss, rng):
    """The segments still lost after one round (a boolean array over `pending`)."""
    lost = rng.random(len(pending)) < loss
    if not data or not parity:
        return lost
    for g in range(0, len(pending) - len(pending) % data, data):
        if lost[g:g + data].sum() + (rng.random(parity) < loss).sum() <= parity:
            lost[g:g + data] = False
    return lost


def transfer_s(nbytes, segment, data, parity, loss, rtt, rate, rng):
    """Seconds from the first send until the receiver holds every segment."""
    n = math.ceil(nbytes / payload(segment, data > 0))
    stretch = (data + parity) / data if data else 1.0
    send = n * stretch * (segment + UDP_IP) / rate
    pending, t = np.arange(n), send
    rounds = 0
    while True:
        lost = _round(pending, data, parity, loss, rng)
        if not lost.any():
            return t + rtt / 2 + rounds * (rtt + INTERVAL)
        pending, rounds = pending[lost], rounds + 1
        if rounds > 60:
            return math.inf


def replay(nbytes, segment, data, parity, loss, rtt, rate, draws, seed=26):
    """`draws` transfer times (s)."""
    rng = np.random.default_rng(seed)
    return np.array([transfer_s(nbytes, segment, data, parity, loss, rtt, rate, rng)
                     for _ in range(draws)])
