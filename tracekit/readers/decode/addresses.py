"""Addresses as text, formatted once per distinct address.

Strategy: a capture holds millions of packets but few distinct addresses, so
addresses are deduplicated with numpy and only the distinct ones are
formatted (by the standard library's `ipaddress`, which writes RFC 5952
text: the same text Wireshark prints). The result is a dictionary: one
int32 index per packet into a list of strings.
"""

import ipaddress

import numpy as np

V4_MAPPED_LO = 0x0000FFFF00000000


def _format(hi, lo):
    if hi == 0 and (lo >> 32) == 0xFFFF:
        return str(ipaddress.IPv4Address(lo & 0xFFFFFFFF))
    return str(ipaddress.IPv6Address((hi << 64) | lo))


def address_dictionary(pairs, cache):
    """Map (hi, lo) uint64 column pairs to indices into one string list.

    `pairs` is a list of (hi, lo, ok) arrays; `cache` maps (hi, lo) to an
    index and is extended in place so indices stay stable across batches
    (with `cache["_list"]` the strings in index order). Returns one int32
    index array per pair, -1 where ok is False.
    """
    strings = cache.setdefault("_list", [])
    keyed = [np.stack([hi, lo], axis=1) for hi, lo, _ in pairs]
    allk = np.concatenate(keyed) if keyed else np.zeros((0, 2), np.uint64)
    allok = np.concatenate([ok for _, _, ok in pairs]) if pairs else np.zeros(0, bool)
    sel = allk[allok]
    if not sel[:, 0].any():  # IPv4 only: one uint64 key is enough (fast path)
        uniq, inverse = np.unique(sel[:, 1], return_inverse=True)
        keys = [(0, lo) for lo in uniq.tolist()]
    else:
        view = np.ascontiguousarray(sel).view([("hi", np.uint64), ("lo", np.uint64)]).ravel()
        uniq, inverse = np.unique(view, return_inverse=True)
        keys = uniq.tolist()
    ids = np.empty(len(keys), np.int32)
    for i, key in enumerate(keys):
        idx = cache.get(key)
        if idx is None:
            idx = len(strings)
            strings.append(_format(*key))
            cache[key] = idx
        ids[i] = idx
    result = np.full(len(allk), -1, np.int32)
    result[allok] = ids[inverse.ravel()]
    out = []
    pos = 0
    for k in keyed:
        out.append(result[pos:pos + len(k)])
        pos += len(k)
    return out
