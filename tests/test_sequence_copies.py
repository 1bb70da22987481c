"""Network copies in a chunk (steps/sequence.py copies()): held against a
brute-force reading of the rule, on chunks with many identical packets.

copies() sorts by a hash and compares only equal-hash neighbours, with ties
put back in frame order by hand (numpy's fast sort is not stable): a packet
must be held against the LATEST earlier packet with the same fields, not any
earlier one. The reference here needs no hash and no sort.
"""

import numpy as np

from tracekit.pipeline.steps.sequence import RTO_MIN_NS, _stable_argsort, copies

FIELDS = ("flow_id", "from_client", "tcp_seq", "tcp_ack", "tcp_flags", "payload_bytes",
          "ip_id", "tsval")


def _chunk(rng, n):
    """n packets, each one of 8 headers (so most have identical ones earlier),
    at times 0, RTO/8 or 2 RTO after the packet before."""
    pool = {name: rng.integers(0, 3, 8).astype(np.int64) for name in FIELDS}
    pool["ip_id"] -= 1  # -1: none (IPv6), 0, 1
    pick = rng.integers(0, 8, n)
    p = {name: pool[name][pick] for name in FIELDS}
    p["from_client"] = p["from_client"] > 0
    p["frame"] = np.arange(1, n + 1, dtype=np.int64)
    steps = rng.choice([0, RTO_MIN_NS // 8, 2 * RTO_MIN_NS], n, p=[0.6, 0.3, 0.1])
    p["ts_ns"] = np.cumsum(steps).astype(np.int64)
    return p


def _reference(p, rto_min_ns):
    """Packet i copies the latest earlier packet with all the fields equal, if
    at the same instant or, with a positive IP id, sooner than rto_min_ns."""
    n = len(p["frame"])
    key = [tuple(int(p[f][i]) for f in FIELDS) for i in range(n)]
    last = {}
    out = np.zeros(n, bool)
    for i in range(n):
        j = last.get(key[i])
        if j is not None:
            dt = p["ts_ns"][i] - p["ts_ns"][j]
            out[i] = dt == 0 or (p["ip_id"][i] > 0 and dt < rto_min_ns)
        last[key[i]] = i
    return out


def test_copies_follow_the_rule_with_many_identical_packets():
    rng = np.random.default_rng(31)
    found = total = 0
    for _ in range(60):
        p = _chunk(rng, int(rng.integers(0, 400)))
        want = _reference(p, RTO_MIN_NS)
        assert np.array_equal(copies(p, RTO_MIN_NS), want)
        found += want.sum()
        total += len(want)
    assert 0.2 * total < found < 0.8 * total  # many copies, and many packets that are not


def test_stable_argsort_is_stable_on_ties():
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 50, 5000):
        h = rng.integers(0, max(n // 10, 1), n).astype(np.uint64)
        assert np.array_equal(_stable_argsort(h), np.argsort(h, kind="stable"))
