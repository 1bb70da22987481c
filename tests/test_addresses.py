"""Addresses to dictionary indices batch by batch (tracekit/readers/decode/addresses.py):
the IPv4 path's binary search gives what one sort of every batch gave."""

import ipaddress

import numpy as np

from tracekit.readers.decode.addresses import address_dictionary

V4 = 0xFFFF << 32


def _by_sorting(batches):
    """The oracle: each batch's wanted keys sorted as a whole, each key not yet
    seen appended in that order; -1 where not wanted."""
    index, names, out = {}, [], []
    for pairs in batches:
        keys = [(int(h), int(lo)) for hi, lo, ok in pairs for h, lo, w in zip(hi, lo, ok) if w]
        for key in sorted(set(keys)):
            if key not in index:
                index[key] = len(names)
                h, lo = key
                names.append(str(ipaddress.IPv4Address(lo & 0xFFFFFFFF)) if h == 0 and lo >> 32 == 0xFFFF
                             else str(ipaddress.IPv6Address((h << 64) | lo)))
        out.append([np.array([index[(int(h), int(lo))] if w else -1
                              for h, lo, w in zip(hi, lo, ok)], np.int32) for hi, lo, ok in pairs])
    return out, names


def test_batches_of_ipv4_and_one_of_ipv6_match_a_sort_of_each():
    rng = np.random.default_rng(7)
    batches = []
    for b in range(5):
        n = 400
        pool = V4 | rng.integers(0, 2**32, 6 + 3 * b, dtype=np.uint64)  # new hosts each batch
        pairs = []
        for _ in range(2):  # source and destination
            lo = rng.choice(pool, n)
            ok = rng.random(n) < 0.9
            lo = np.where(ok, lo, rng.integers(0, 2**63, n, dtype=np.uint64))  # junk where unwanted
            hi = np.zeros(n, np.uint64)
            if b == 3:  # IPv6 among them: the general path, between IPv4 batches
                hi[:5] = 0x20010DB8 << 32
            pairs.append((hi, lo, ok))
        batches.append(pairs)
    cache = {}
    got = [address_dictionary(list(p), cache) for p in batches]
    want, names = _by_sorting(batches)
    assert cache["_list"] == names
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            assert a.dtype == np.int32 and np.array_equal(a, b)
