"""Addresses as text, formatted once per distinct address.

Strategy: a capture holds millions of packets but few distinct addresses, so
addresses are deduplicated with numpy and only the distinct ones are
formatted (by the standard library's `ipaddress`, which writes RFC 5952
text: the same text Wireshark prints). The result is a dictionary: one
int32 index per packet into a list of strings.
"""

import ipaddress

import numpy as np

from ...core.arrays import distinct

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
    if pairs and not any(hi[ok].any() for hi, _, ok in pairs):
        return _v4_indices(pairs, cache, strings)
    keyed = [np.stack([hi, lo], axis=1) for hi, lo, _ in pairs]
    allk = np.concatenate(keyed) if keyed else np.zeros((0, 2), np.uint64)
    allok = np.concatenate([ok for _, _, ok in pairs]) if pairs else np.zeros(0, bool)
    sel = allk[allok]
    view = np.ascontiguousarray(sel).view([("hi", np.uint64), ("lo", np.uint64)]).ravel()
    uniq, inverse = np.unique(view, return_inverse=True)
    ids = _ids(uniq.tolist(), cache, strings)
    result = np.full(len(allk), -1, np.int32)
    result[allok] = ids[inverse.ravel()]
    out = []
    pos = 0
    for k in keyed:
        out.append(result[pos:pos + len(k)])
        pos += len(k)
    return out


def _ids(keys, cache, strings):
    """The index of each (hi, lo) key, new ones formatted and added in order."""
    ids = np.empty(len(keys), np.int32)
    for i, key in enumerate(keys):
        idx = cache.get(key)
        if idx is None:
            idx = len(strings)
            strings.append(_format(*key))
            cache[key] = idx
        ids[i] = idx
    return ids


def _v4_indices(pairs, cache, strings):
    """IPv4 only (every wanted `hi` 0): one uint64 key, looked up by binary
    search among the keys of earlier batches (`cache["_v4"]`: sorted keys and
    their indices); only keys not seen yet are sorted and added, in ascending
    order, as a sort of all would add them. A capture's few distinct
    addresses cost a search per packet, not a sort of every packet's."""
    known, known_ids = cache.get("_v4", (np.zeros(0, np.uint64), np.zeros(0, np.int32)))
    los = [np.asarray(lo, np.uint64) for _, lo, _ in pairs]
    missing = [lo[ok & ~_found(known, lo)] for lo, (_, _, ok) in zip(los, pairs)]
    new = distinct(np.concatenate(missing))
    if len(new):
        ids = _ids([(0, k) for k in new.tolist()], cache, strings)
        merged = np.concatenate([known, new])
        order = np.argsort(merged, kind="stable")
        known, known_ids = merged[order], np.concatenate([known_ids, ids])[order]
        cache["_v4"] = (known, known_ids)
    out = []
    for lo, (_, _, ok) in zip(los, pairs):
        if not len(known):
            out.append(np.full(len(lo), -1, np.int32))
            continue
        at = np.minimum(np.searchsorted(known, lo), len(known) - 1)
        out.append(np.where(ok, known_ids[at], np.int32(-1)).astype(np.int32, copy=False))
    return out


def _found(known, lo):
    if not len(known):
        return np.zeros(len(lo), bool)
    return known[np.minimum(np.searchsorted(known, lo), len(known) - 1)] == lo
