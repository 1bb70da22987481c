"""Decoded numpy columns of one batch -> an Arrow table shaped like `packets`.

Strategy: values stay in numpy; only null masks and dictionary encodings are
added here, so building the table copies each column at most once. Text
columns (addresses, status, QUIC type) are Arrow dictionaries over small
string lists, which DuckDB loads as plain VARCHAR.
"""

import numpy as np
import pyarrow as pa

from ..decode.status import STATUS
from ..decode.transport import MAX_SACK_BLOCKS, QUIC_TYPE_NAMES
from ..decode.flows import NONE, S
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


def string_array(items):
    """A string array from a Python sequence of str (pa.array would import pandas)."""
    encoded = [x.encode() for x in items]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(encoded),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


_STATUS_DICT = string_array([s or "" for s in STATUS])
_QUIC_DICT = string_array(QUIC_TYPE_NAMES)


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


def packets_table(capture_id, batch, link_type, cols, flow_id, from_client, shift,
                  src_idx, dst_idx, addresses):
    """Build the Arrow table of one batch (column order of `packets`)."""
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
    addr_dict = string_array(addresses)
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
    arrays = []
    for field in PACKETS_SCHEMA:
        name = field.name
        if name == "decode_status":
            arrays.append(_dict(np.where(status == 0, -1, status.astype(np.int32)), _STATUS_DICT))
        elif name == "src_addr":
            arrays.append(_dict(src_idx, addr_dict))
        elif name == "dst_addr":
            arrays.append(_dict(dst_idx, addr_dict))
        elif name == "quic_type":
            arrays.append(_dict(cols["quic_type"].astype(np.int32), _QUIC_DICT))
        elif name == "tcp_sack_left":
            arrays.append(_sack(cols["tcp_sack_left"], cols["tcp_sack_count"], cols["tcp_sack_count"] == 0))
        elif name == "tcp_sack_right":
            arrays.append(_sack(cols["tcp_sack_right"], cols["tcp_sack_count"], cols["tcp_sack_count"] == 0))
        else:
            values, null = v[name]
            arrays.append(_col(values, null, field.type))
    return pa.Table.from_arrays(arrays, schema=PACKETS_SCHEMA)


def flows_table(capture_id, stats, ends, address_cache):
    """Build the Arrow table of `flows` from the flow tracker's counters."""
    from ..decode.addresses import address_dictionary

    n = len(stats)
    client_is_a = stats[:, S["client_is_a"]] == 1
    a_idx, b_idx = address_dictionary(
        [(ends[:, 0], ends[:, 1], np.ones(n, bool)), (ends[:, 3], ends[:, 4], np.ones(n, bool))],
        address_cache)
    a_port, b_port = ends[:, 2].astype(np.int32), ends[:, 5].astype(np.int32)
    tcp = stats[:, S["protocol"]] == 6
    handshake_seen = (stats[:, S["syn_count"]] > 0) | (stats[:, S["synack_count"]] > 0)
    fast_open = np.where(stats[:, S["fast_open"]] == 1, 1, 0)
    names = address_cache["_list"]
    derived = {
        "capture_id": (np.full(n, capture_id, np.int32), None),
        "flow_id": (np.arange(n, dtype=np.int64), None),
        "ip_version": (stats[:, S["ip_version"]].astype(np.int8), None),
        "client_port": (np.where(client_is_a, a_port, b_port), None),
        "server_port": (np.where(client_is_a, b_port, a_port), None),
        "fast_open": (fast_open.astype(bool), ~(tcp & handshake_seen)),
    }
    for name in ("syn_count", "synack_count"):
        derived[name] = (stats[:, S[name]].astype(np.int32), ~tcp)
    for name in ("client_sack_permitted", "server_sack_permitted"):
        v = stats[:, S[name]]
        derived[name] = (v == 1, v == NONE)
    arrays = []
    for field in FLOWS_SCHEMA:
        name = field.name
        if name == "protocol":
            arrays.append(_dict(np.where(tcp, 0, 1), string_array(["tcp", "udp"])))
        elif name in ("client_addr", "server_addr"):
            pick_a = client_is_a if name == "client_addr" else ~client_is_a
            arrays.append(_dict(np.where(pick_a, a_idx, b_idx), string_array(names)))
        elif name in derived:
            values, null = derived[name]
            arrays.append(_col(values, null, field.type))
        else:
            v = stats[:, S[name]]
            arrays.append(_col(v, v == NONE, field.type))
    return pa.Table.from_arrays(arrays, schema=FLOWS_SCHEMA)


def append(con, table, rows):
    """Append an Arrow table's rows to a table of the store."""
    if rows.num_rows == 0:
        return
    con.register("_tracekit_rows", rows)
    try:
        con.execute(f"INSERT INTO {storage(table)} SELECT * FROM _tracekit_rows")
    finally:
        con.unregister("_tracekit_rows")
