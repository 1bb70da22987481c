"""Decoded numpy columns of one batch -> an Arrow table shaped like `packets`.

Strategy: values stay in numpy; only null masks and dictionary encodings are
added here, so building the table copies each column at most once. Text
columns (addresses, status, QUIC type) are Arrow dictionaries over small
string lists, which DuckDB loads as plain VARCHAR.
"""

import numpy as np
import pyarrow as pa

from ..readers.decode.status import STATUS
from ..readers.decode.transport import MAX_SACK_BLOCKS, QUIC_TYPE_NAMES
from .schema import FLOWS, PACKETS, storage

_ARROW = {
    "INTEGER": pa.int32(), "BIGINT": pa.int64(), "TINYINT": pa.int8(),
    "UTINYINT": pa.uint8(), "USMALLINT": pa.uint16(), "UINTEGER": pa.uint32(),
    "BOOLEAN": pa.bool_(), "VARCHAR": pa.dictionary(pa.int32(), pa.string()),
    "UINTEGER[]": pa.list_(pa.uint32()), "DOUBLE": pa.float64(),
}
PACKETS_SCHEMA = pa.schema([(c.name, _ARROW[c.sql.replace(" NOT NULL", "")]) for c in PACKETS])
FLOWS_SCHEMA = pa.schema([(c.name, _ARROW[c.sql.replace(" NOT NULL", "")]) for c in FLOWS])
_NUMPY = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
          pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32,
          pa.float64(): np.float64}


# Arrays are assembled from numpy buffers with Array.from_buffers: pa.array()
# would import pandas to probe its argument (half a second of start-up).

def _validity(null):
    if null is None or not null.any():
        return None
    return pa.py_buffer(np.packbits(~null, bitorder="little"))


def _col(values, null, typ):
    n = len(values)
    if typ == pa.bool_():
        data = pa.py_buffer(np.packbits(values.astype(bool), bitorder="little"))
    else:
        data = pa.py_buffer(np.ascontiguousarray(values, dtype=_NUMPY[typ]))
    return pa.Array.from_buffers(typ, n, [_validity(null), data])


def fetch_numpy(con, sql, params=None):
    """{column: numpy array} of a query's result (the steps' reads)."""
    return {k: np.asarray(v) for k, v in con.execute(sql, params or {}).fetchnumpy().items()}


def read_ahead(con, reads):
    """For each item of `reads` (a list of (sql, params)), the fetch_numpy of
    its queries, in order; the next item is read on a thread with a cursor of
    its own while the caller works on this one (DuckDB's scans and most of
    numpy release the GIL: on two cores the read and the work overlap). Two
    items' arrays are held at once."""
    from concurrent.futures import ThreadPoolExecutor  # (13 ms: not at ingest's start-up)
    cur = con.cursor()
    pool = ThreadPoolExecutor(1)  # one read at a time on the cursor
    try:
        ahead = None
        for item in reads:
            previous, ahead = ahead, pool.submit(_fetch_all, cur, item)
            if previous is not None:
                yield previous.result()
        if ahead is not None:
            yield ahead.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        cur.close()


def chunk_reads(con, capture_id, frames, chunk_frames, *sqls):
    """(hi, [fetch_numpy of each of `sqls`]) for each chunk of a capture's frames,
    frame >= $lo AND frame < $hi, from frame 1 in turn, the next read ahead."""
    spans = [{"capture_id": capture_id, "lo": lo, "hi": lo + chunk_frames}
             for lo in range(1, frames + 1, chunk_frames)]
    reads = read_ahead(con, ([(sql, span) for sql in sqls] for span in spans))
    for results, span in zip(reads, spans):  # (reads first: it ends, and closes, before spans)
        yield span["hi"], results


def _fetch_all(cur, item):
    return [fetch_numpy(cur, sql, params) for sql, params in item]


def frame_rows(frames, wanted):
    """Where each of `wanted` is in `frames` (ascending, unique: a read in frame
    order), and whether it is there: (row index, found). A gapless run of
    frames is indexed by subtraction; otherwise a binary search."""
    frames, wanted = np.asarray(frames, np.int64), np.asarray(wanted, np.int64)
    n = len(frames)
    if n == 0:
        return np.zeros(len(wanted), np.int64), np.zeros(len(wanted), bool)
    if frames[-1] - frames[0] == n - 1:
        at = wanted - frames[0]
        found = (at >= 0) & (at < n)
        return np.clip(at, 0, n - 1), found
    at = np.minimum(np.searchsorted(frames, wanted), n - 1)
    return at, frames[at] == wanted


def values_at(frames, values, wanted, missing=-1):
    """`values` (one per frame of `frames`: ascending, unique) at each of
    `wanted`, as int64; `missing` where a frame is not among them."""
    at, found = frame_rows(frames, wanted)
    out = np.full(len(wanted), missing, np.int64)
    out[found] = np.asarray(values)[at[found]]
    return out


def among(frames, wanted):
    """Whether each of `wanted` is one of `frames` (ascending, unique): a chunk's
    packets among a capture's few marked ones. np.isin sorts both at every
    call: 0.26 s a chunk against a capture's 385,600 duplicate ACKs (29 M
    packets), where this takes 3 ms."""
    return frame_rows(frames, wanted)[1]


def numpy_array(values, null=None, typ=pa.int64()):
    """An Arrow array of a numpy column (`null` a mask or None), without
    pyarrow's array(), which imports pandas (half a second) to probe it."""
    return _col(np.asarray(values), null, typ)


def numpy_table(columns, values):
    """An Arrow table from {name: (numpy values, null mask or None)} in the order
    of `columns` (schema Column tuples); a VARCHAR column is given as
    (indices, None, names): index -1 is NULL."""
    arrays = []
    for c in columns:
        v = values[c.name]
        if len(v) == 3:
            arrays.append(_dict(v[0], string_array(v[2])))
        else:
            arrays.append(_col(*v, _ARROW[c.sql.replace(" NOT NULL", "")]))
    return pa.Table.from_arrays(arrays, names=[c.name for c in columns])


def whole(column):
    """A ChunkedArray as one Array (combine_chunks() of no chunks imports pandas,
    0.2 s of a small capture's analyze, to probe an empty list)."""
    if column.num_chunks == 1:
        return column.chunk(0)
    return column.combine_chunks() if column.num_chunks else pa.nulls(0, column.type)


def string_array(items):
    """A string array from a Python sequence of str (pa.array would import pandas)."""
    encoded = [x.encode() for x in items]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(encoded),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


_STATUS_DICT = string_array([s or "" for s in STATUS])
_QUIC_DICT = string_array(QUIC_TYPE_NAMES)
_PROTOCOL_DICT = string_array(["tcp", "udp"])


def _dict(indices, dictionary):
    idx = _col(indices.astype(np.int32, copy=False), indices < 0, pa.int32())
    return pa.DictionaryArray.from_arrays(idx, dictionary)


def _sack(values, count, null):
    counts = np.where(null, 0, count).astype(np.int32)
    offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    take = np.arange(MAX_SACK_BLOCKS)[None, :] < counts[:, None]
    flat = _col(values[take], None, pa.uint32())
    return pa.Array.from_buffers(pa.list_(pa.uint32()), len(counts),
                                 [_validity(null), pa.py_buffer(offsets)], children=[flat])


class _Dict(tuple):
    """A text column as (indices, names): index -1 is NULL; `names` a list of
    str or an Arrow string array shared by every part that uses it."""


class _Sack(tuple):
    """A SACK edge column as (values (n, 4), blocks per packet, null mask)."""


def packet_columns(capture_id, batch, link_type, cols, flow_id, from_client, shift,
                   src_idx, dst_idx, addresses):
    """The `packets` columns of one batch as numpy: {name: (values, null mask)},
    `_Dict` or `_Sack` (for `gathered_table`)."""
    n = len(batch)
    status = cols["status"]
    is_ip = cols["addr_ok"]
    tcp = cols["is_tcp"]
    tcp_ok = cols["tcp_ok"]
    udp = cols["is_udp"]
    no_flow = flow_id < 0
    has_opts = tcp & (cols["tcp_header_bytes"] > 20)
    shift_known = shift >= 0
    window = cols["tcp_window"].astype(np.int64)
    window_bytes = np.where(shift_known, window << np.maximum(shift, 0).astype(np.int64), window)
    iface = batch.interface_id
    v = {
        "capture_id": (np.full(n, capture_id, np.int32), None),
        "frame": (np.arange(batch.first_frame, batch.first_frame + n, dtype=np.int64), None),
        "ts_ns": (batch.ts_ns, batch.ts_bad),
        "file_offset": (batch.file_offset, None),
        "interface_id": (iface, iface < 0),
        "link_type": (link_type, link_type < 0),
        "captured_bytes": (batch.captured_bytes, None),
        "wire_bytes": (batch.wire_bytes, None),
        "truncated": (batch.captured_bytes < batch.wire_bytes, None),
        "ethertype": (cols["ethertype"], cols["ethertype"] < 0),
        "vlan_outer": (cols["vlan_outer"], cols["vlan_outer"] < 0),
        "vlan_inner": (cols["vlan_inner"], cols["vlan_inner"] < 0),
        "ip_version": (cols["ip_version"], ~is_ip),
        "ip_ttl": (cols["ip_ttl"], ~is_ip),
        "ip_tos": (cols["ip_tos"], ~is_ip),
        "ip_id": (cols["ip_id"], cols["ip_id"] < 0),
        "ip_header_bytes": (cols["ip_header_bytes"], cols["ip_header_bytes"] < 0),
        "ip_total_bytes": (cols["ip_total_bytes"], cols["ip_total_bytes"] < 0),
        "ip_dont_fragment": (cols["ip_dont_fragment"], ~is_ip | (cols["ip_version"] != 4)),
        "ip_more_fragments": (cols["ip_more_fragments"], ~is_ip),
        "ip_fragment_offset": (cols["ip_fragment_offset"], ~is_ip),
        "ipv6_flow_label": (cols["ipv6_flow_label"], cols["ipv6_flow_label"] < 0),
        "ipv6_ext_headers": (cols["ipv6_ext_headers"], ~is_ip | (cols["ip_version"] != 6)),
        "protocol": (np.maximum(cols["protocol"], 0).astype(np.uint8), cols["protocol"] < 0),
        "src_port": (cols["src_port"], cols["src_port"] < 0),
        "dst_port": (cols["dst_port"], cols["dst_port"] < 0),
        "flow_id": (flow_id, no_flow),
        "from_client": (from_client, no_flow),
        "tcp_seq": (cols["tcp_seq"], ~tcp_ok),
        "tcp_ack": (cols["tcp_ack"], ~tcp_ok),
        "tcp_flags": (cols["tcp_flags"], ~tcp_ok),
        "tcp_header_bytes": (cols["tcp_header_bytes"].astype(np.int8), ~tcp | (cols["tcp_header_bytes"] == 0)),
        "tcp_window": (cols["tcp_window"], ~tcp_ok),
        "tcp_window_shift": (shift, ~tcp_ok),
        "tcp_window_bytes": (window_bytes, ~tcp_ok),
        "tcp_checksum": (cols["tcp_checksum"], ~tcp_ok),
        "tcp_urgent_pointer": (cols["tcp_urgent_pointer"], ~tcp_ok),
        "tcp_mss": (cols["tcp_mss"], cols["tcp_mss"] < 0),
        "tcp_wscale": (cols["tcp_wscale"].astype(np.int8), cols["tcp_wscale"] < 0),
        "tcp_sack_permitted": (cols["tcp_sack_permitted"], ~has_opts),
        "tcp_tsval": (cols["tcp_tsval"], ~cols["tcp_has_ts"]),
        "tcp_tsecr": (cols["tcp_tsecr"], ~cols["tcp_has_ts"]),
        "tcp_fast_open": (cols["tcp_fast_open"], ~has_opts),
        "payload_bytes": (cols["payload_bytes"].astype(np.int32), cols["payload_bytes"] < 0),
        "udp_length": (cols["udp_length"], ~udp | (cols["udp_length"] < 0)),
        "quic_version": (cols["quic_version"], cols["quic_type"] < 0),
        "quic_dcid_len": (np.maximum(cols["quic_dcid_len"], 0).astype(np.uint8), cols["quic_type"] < 0),
        "quic_scid_len": (np.maximum(cols["quic_scid_len"], 0).astype(np.uint8), cols["quic_type"] < 0),
    }
    v["decode_status"] = _Dict((np.where(status == 0, -1, status.astype(np.int32)), _STATUS_DICT))
    v["src_addr"] = _Dict((src_idx, addresses))
    v["dst_addr"] = _Dict((dst_idx, addresses))
    v["quic_type"] = _Dict((cols["quic_type"].astype(np.int32), _QUIC_DICT))
    count = cols["tcp_sack_count"]
    for side in ("left", "right"):
        v[f"tcp_sack_{side}"] = _Sack((cols[f"tcp_sack_{side}"], count, count == 0))
    return v


def flow_columns(capture_id, rows, address_cache):
    """The `flows` columns of flows of one capture as numpy (see `packet_columns`);
    `rows` a decode.flows.FlowRows."""
    from ..readers.decode.addresses import address_dictionary

    n = len(rows)
    client_is_a = rows.column("client_is_a")[0] == 1
    (a_hi, a_lo, a_port), (b_hi, b_lo, b_port) = rows.endpoints()
    a_idx, b_idx = address_dictionary(
        [(a_hi, a_lo, np.ones(n, bool)), (b_hi, b_lo, np.ones(n, bool))], address_cache)
    a_port, b_port = a_port.astype(np.int32), b_port.astype(np.int32)
    tcp = rows.column("protocol")[0] == 6
    handshake_seen = (rows.column("syn_count")[0] > 0) | (rows.column("synack_count")[0] > 0)
    fast_open = np.where(rows.column("fast_open")[0] == 1, 1, 0)
    names = address_cache["_list"]
    derived = {
        "capture_id": (np.full(n, capture_id, np.int32), None),
        "flow_id": (np.asarray(rows.ids, np.int64), None),
        "ip_version": (rows.column("ip_version")[0].astype(np.int8), None),
        "client_port": (np.where(client_is_a, a_port, b_port), None),
        "server_port": (np.where(client_is_a, b_port, a_port), None),
        "fast_open": (fast_open.astype(bool), ~(tcp & handshake_seen)),
    }
    for name in ("syn_count", "synack_count"):
        derived[name] = (rows.column(name)[0].astype(np.int32), ~tcp)
    for name in ("client_sack_permitted", "server_sack_permitted"):
        v, null = rows.column(name)
        derived[name] = (v == 1, null)
    derived["protocol"] = _Dict((np.where(tcp, 0, 1), _PROTOCOL_DICT))
    derived["client_addr"] = _Dict((np.where(client_is_a, a_idx, b_idx), names))
    derived["server_addr"] = _Dict((np.where(client_is_a, b_idx, a_idx), names))
    for field in FLOWS_SCHEMA:
        if field.name not in derived:
            derived[field.name] = rows.column(field.name)
    return derived


def gathered_table(schema, parts):
    """One Arrow table of `schema` from the columns of many batches or files
    (`packet_columns`, `flow_columns`). A table costs some ninety small
    array constructions whatever its rows: a directory of small captures
    makes one table per group of files, not one per file."""
    arrays = []
    for field in schema:
        specs = [part[field.name] for part in parts]
        first = specs[0]
        if isinstance(first, _Dict):
            arrays.append(_gathered_dict(specs))
        elif isinstance(first, _Sack):
            values, count, null = (_cat([s[k] for s in specs]) for k in range(3))
            arrays.append(_sack(values, count, null))
        else:
            nulls = [s[1] for s in specs]
            if all(m is None for m in nulls):
                null = None
            else:
                null = _cat([np.zeros(len(s[0]), bool) if s[1] is None else s[1] for s in specs])
            arrays.append(_col(_cat([s[0] for s in specs]), null, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _cat(arrays):
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _gathered_dict(specs):
    """One dictionary column from parts with their own names: the names of
    each distinct list once, one after the other, and the indices moved."""
    at, names, indices, size = {}, [], [], 0
    for idx, part_names in specs:
        key = id(part_names)
        if key not in at:
            at[key] = size
            names.append(part_names)
            size += len(part_names)
        shift = at[key]
        indices.append(idx if not shift else np.where(idx < 0, -1, idx + shift))
    if len(names) == 1 and isinstance(names[0], pa.Array):
        dictionary = names[0]
    else:
        dictionary = string_array([x for n in names for x in n])
    return _dict(_cat(indices), dictionary)


def append(con, table, rows):
    """Append an Arrow table's rows to a table of the store."""
    if rows.num_rows == 0:
        return
    con.register("_tracekit_rows", rows)
    try:
        con.execute(f"INSERT INTO {storage(table)} SELECT * FROM _tracekit_rows")
    finally:
        con.unregister("_tracekit_rows")
