"""TLS over TCP: the handshake messages each flow exchanged, from the payload.

Reassembles only what the record and handshake headers need: for each TCP
flow whose client opened with a TLS handshake record (first bytes 0x16 0x03),
the first 64 KiB of each direction are read back from the capture file
(capture/records.py), put in sequence order (first copy of each byte wins),
and cut into TLS records (RFC 8446 sec. 5.1: type, version, 2-byte length).
Plaintext handshake records are joined into one handshake stream per
direction, since a message may span records and a record may hold several
messages, and cut into handshake messages (RFC 8446 sec. 4: type, 3-byte
length). Once a direction is encrypted -- after its ChangeCipherSpec, or
after a TLS 1.3 ServerHello for the server -- its records are listed, not
parsed. In TLS 1.3 a ChangeCipherSpec is the middlebox-compatibility dummy
and changes nothing: after a HelloRetryRequest the second ClientHello and
the real ServerHello are read too.

From the ClientHello: SNI, offered ALPN protocols, supported_versions,
pre_shared_key and early_data extensions; from the ServerHello: the version
(its supported_versions extension, else the legacy field), whether it is a
HelloRetryRequest (the fixed random of RFC 8446 sec. 4.1.3), the ALPN choice
(TLS 1.2; TLS 1.3 sends it encrypted) and whether a PSK or the offered
session id was accepted (resumption).

Each row has the frame and time of the segment that completed the message
or record. A stream cut by the snapshot length or by a capture gap ends the
parse there (`complete` false on the flow's last row).
"""

import hashlib

import numpy as np

from ...readers.capture.records import read_records
from ...readers.decode.packets import decode_packets
from ...store.arrow import append, numpy_table
from ...store.schema import TLS_MESSAGES

MAX_STREAM = 65536
HRR_RANDOM = hashlib.sha256(b"HelloRetryRequest").digest()
CONTENT = {20: "change_cipher_spec", 21: "alert", 22: "handshake", 23: "application_data",
           24: "heartbeat"}
HANDSHAKE = {0: "hello_request", 1: "client_hello", 2: "server_hello", 4: "new_session_ticket",
             5: "end_of_early_data", 8: "encrypted_extensions", 11: "certificate",
             12: "server_key_exchange", 13: "certificate_request", 14: "server_hello_done",
             15: "certificate_verify", 16: "client_key_exchange", 20: "finished",
             22: "certificate_status", 24: "key_update"}
VERSIONS = {0x0300: "SSL 3.0", 0x0301: "TLS 1.0", 0x0302: "TLS 1.1", 0x0303: "TLS 1.2",
            0x0304: "TLS 1.3"}

FIRST_SEGMENTS_SQL = """
SELECT t.flow_id, p.file_offset, coalesce(p.link_type, -1) AS link_type, p.wire_bytes,
       k.payload
FROM tcp_analysis t JOIN packets p USING (capture_id, frame)
LEFT JOIN payloads k USING (capture_id, frame)
WHERE t.capture_id = $capture_id AND t.from_client AND t.payload_bytes > 0
  AND t.segment IN ('new', 'hole_fill', 'reordered') AND t.rel_seq = 1
QUALIFY row_number() OVER (PARTITION BY t.flow_id ORDER BY t.frame) = 1
"""

SEGMENTS_SQL = """
SELECT t.flow_id, t.from_client, t.frame, t.ts_ns, t.rel_seq, t.payload_bytes,
       p.file_offset, p.link_type, p.wire_bytes, k.payload
FROM tcp_analysis t JOIN packets p USING (capture_id, frame)
LEFT JOIN payloads k USING (capture_id, frame)
WHERE t.capture_id = $capture_id AND t.payload_bytes > 0 AND t.rel_seq < $limit
  AND t.segment IN ('new', 'hole_fill', 'reordered')
  AND t.flow_id IN (SELECT unnest($flows::BIGINT[]))
ORDER BY t.frame
"""

# a store whose ingest kept the payloads: every kept segment of the capture
# (TLS connections from their start, STARTTLS ones from their first TLS record)
KEPT_SEGMENTS_SQL = """
SELECT t.flow_id, t.from_client, t.frame, t.ts_ns, t.rel_seq, k.payload
FROM payloads k JOIN tcp_analysis t USING (capture_id, frame)
WHERE k.capture_id = $capture_id AND t.capture_id = $capture_id
  AND t.segment IN ('new', 'hole_fill', 'reordered')
ORDER BY t.frame
"""


def _locate(path, fmt, offsets, link, wire):
    """(buffer, payload start, captured payload length) of TCP records by file offset."""
    data, start, caplen = read_records(path, fmt, offsets)
    cols = decode_packets(data, start, caplen, wire, link)
    begin = start + cols["l4"] + cols["tcp_header_bytes"].astype(np.int64)
    n = np.clip(np.minimum(cols["payload_bytes"].astype(np.int64), start + caplen - begin), 0, None)
    return data, begin, n


def _check_file(path, size):
    """The payload bytes are read back from the capture file: it must still be the
    file that was ingested (never silently no rows)."""
    import os

    from ...core.errors import TracekitError
    try:
        now = os.stat(path).st_size
    except OSError as e:
        raise TracekitError(f"the capture file {path} cannot be read ({e.strerror}): TLS "
                            f"messages are read from its payload bytes; put it back or "
                            f"ingest it again") from None
    if now != size:
        raise TracekitError(f"the capture file {path} changed since it was ingested ({now:,} "
                            f"bytes, was {size:,}): TLS messages are read from its payload "
                            f"bytes; ingest it again with --replace")


def _payloads(path, fmt, offsets, link, wire):
    """The captured TCP payload bytes of each record."""
    data, begin, n = _locate(path, fmt, offsets, link, wire)
    return [data[b:b + k].tobytes() for b, k in zip(begin.tolist(), n.tolist())]


def _opens_tls(path, fmt, offsets, link, wire):
    """Which records' payload starts like a TLS handshake record (0x16 0x03)."""
    data, begin, n = _locate(path, fmt, offsets, link, wire)
    ok = n >= 2
    first = np.zeros(len(n), np.int64)
    second = np.zeros(len(n), np.int64)
    first[ok] = data[begin[ok]]
    second[ok] = data[begin[ok] + 1]
    return ok & (first == 22) & (second == 3)


def _u(b, pos, n):
    return int.from_bytes(b[pos:pos + n], "big")


def _extensions(body, pos):
    """{type: bytes} of a hello's extension block starting at pos."""
    out = {}
    if pos + 2 > len(body):
        return out
    end = min(len(body), pos + 2 + _u(body, pos, 2))
    pos += 2
    while pos + 4 <= end:
        typ, n = _u(body, pos, 2), _u(body, pos + 2, 2)
        out[typ] = body[pos + 4:pos + 4 + n]
        pos += 4 + n
    return out


def _alpn_list(ext):
    names, pos = [], 2
    while pos < len(ext):
        n = ext[pos]
        names.append(ext[pos + 1:pos + 1 + n].decode("ascii", "replace"))
        pos += 1 + n
    return ",".join(names)


def _sni(ext):
    pos = 2
    while pos + 3 <= len(ext):
        typ, n = ext[pos], _u(ext, pos + 1, 2)
        if typ == 0:
            return ext[pos + 3:pos + 3 + n].decode("ascii", "replace")
        pos += 3 + n
    return None


def client_hello(body):
    info = {"legacy_version": _u(body, 0, 2)}
    pos = 34
    sid = body[pos] if pos < len(body) else 0
    info["session_id"] = body[pos + 1:pos + 1 + sid]
    pos += 1 + sid
    pos += 2 + _u(body, pos, 2)  # cipher suites
    pos += 1 + (body[pos] if pos < len(body) else 0)  # compression methods
    ext = _extensions(body, pos)
    info["sni"] = _sni(ext[0]) if 0 in ext else None
    info["alpn"] = _alpn_list(ext[16]) if 16 in ext else None
    if 43 in ext:
        vs = ext[43][1:]
        info["versions"] = [_u(vs, i, 2) for i in range(0, len(vs) - 1, 2)]
    info["psk"] = 41 in ext
    info["early_data"] = 42 in ext
    return info


def server_hello(body):
    info = {"legacy_version": _u(body, 0, 2), "hrr": body[2:34] == HRR_RANDOM}
    pos = 34
    sid = body[pos] if pos < len(body) else 0
    info["session_id"] = body[pos + 1:pos + 1 + sid]
    pos += 1 + sid + 2 + 1  # session id, cipher suite, compression
    ext = _extensions(body, pos)
    info["version"] = _u(ext[43], 0, 2) if len(ext.get(43, b"")) >= 2 else info["legacy_version"]
    info["alpn"] = _alpn_list(ext[16]) if 16 in ext else None
    info["psk"] = 41 in ext
    return info


class Direction:
    """One direction's reassembled stream and the segment that delivered each byte."""

    def __init__(self, segments):
        segments.sort(key=lambda s: (s[0], s[2]))  # rel_seq, frame
        buf = bytearray()
        self.ends, self.frames, self.times = [], [], []
        self.complete = True
        # the stream starts at relative 1, or where TLS began after a STARTTLS
        self.start = segments[0][0] if segments else 1
        for rel_seq, payload, frame, ts in segments:
            at = rel_seq - self.start
            if at > len(buf):  # a gap: stop at it
                self.complete = False
                break
            new = payload[len(buf) - at:]
            if not new:
                continue
            buf += new
            self.ends.append(len(buf))
            self.frames.append(frame)
            self.times.append(ts)
        self.data = bytes(buf)

    def at(self, offset):
        """(frame, ts) of the segment that delivered byte `offset`."""
        k = int(np.searchsorted(self.ends, offset, side="right"))
        k = min(k, len(self.ends) - 1)
        return self.frames[k], self.times[k]


def parse_direction(stream, client, tls13):
    """Rows (message, first/last byte offsets, record type, fields) of one direction."""
    rows, hs, hs_start, encrypted, retry = [], b"", 0, False, False
    data, pos = stream.data, 0
    complete = stream.complete
    while pos + 5 <= len(data):
        ctype, length = data[pos], _u(data, pos + 3, 2)
        if ctype not in CONTENT or data[pos + 1] != 3:
            complete = False
            break
        if pos + 5 + length > len(data):
            complete = False
            break
        body = data[pos + 5:pos + 5 + length]
        first, last = pos, pos + 5 + length - 1
        if ctype == 22 and not encrypted:
            if not hs:
                hs_start = first
            hs += body
            while len(hs) >= 4 and len(hs) >= 4 + _u(hs, 1, 3):
                n = _u(hs, 1, 3)
                typ, msg = hs[0], hs[4:4 + n]
                fields = {}
                if typ == 1:
                    fields = client_hello(msg)
                elif typ == 2:
                    fields = server_hello(msg)
                name = HANDSHAKE.get(typ, f"handshake_{typ}")
                if typ == 2 and fields.get("hrr"):
                    name = "hello_retry_request"
                    retry = True
                rows.append((name, hs_start, last, ctype, length, fields))
                hs = hs[4 + n:]
                hs_start = last
                if typ == 2 and not client and not fields.get("hrr") and fields["version"] == 0x0304:
                    encrypted = True  # everything after a TLS 1.3 ServerHello is encrypted
                    tls13[0] = True
        elif ctype == 20:
            rows.append(("change_cipher_spec", first, last, ctype, length, {}))
            # TLS 1.3's ChangeCipherSpec is a dummy for middleboxes (RFC 8446
            # appendix D.4): after a HelloRetryRequest the real ServerHello and
            # the second ClientHello still follow in plaintext
            if not (tls13[0] or retry):
                encrypted = True
        elif ctype == 21 and not encrypted:
            rows.append(("alert", first, last, ctype, length, {}))
        else:
            name = {22: "encrypted_handshake", 21: "encrypted_alert"}.get(ctype, "application_data")
            if client and tls13[0]:
                encrypted = True
            rows.append((name, first, last, ctype, length, {}))
        pos += 5 + length
    return rows, complete


TABLES = ("tls_messages",)
READS = ("captures", "packets", "payloads", "tcp_analysis")
SCOPE = "capture"  # built per capture (tracekit.pipeline.dag)


def build(con, writer, capture_id):
    """Write the `tls_messages` of one capture through `writer`; {table: rows}."""
    table = messages_table(con, capture_id)
    append(writer, "tls_messages", table)
    return {"tls_messages": table.num_rows}


def messages_table(con, capture_id):
    """Arrow table of `tls_messages` for one capture."""
    (path, fmt, size, kept), = con.execute(
        "SELECT path, format, size_bytes, payloads_kept FROM captures WHERE capture_id = ?",
        [capture_id]).fetchall()
    out = {c.name: [] for c in TLS_MESSAGES}
    if kept:
        # ingest kept every byte this needs (decode/payloads.py): read only those
        rows = con.execute(KEPT_SEGMENTS_SQL, {"capture_id": capture_id}).fetchall()
        per = {}
        for flow, client, frame, ts, rel_seq, payload in rows:
            per.setdefault((flow, client), []).append((rel_seq, bytes(payload), frame, ts))
        for flow in sorted({flow for flow, _ in per}):
            _flow_rows(out, capture_id, flow, per)
    else:
        _from_file(con, capture_id, path, fmt, size, out)
    values = {}
    for c in TLS_MESSAGES:
        col = out[c.name]
        if c.sql.startswith("VARCHAR"):
            names = sorted({v for v in col if v is not None})
            index = {v: k for k, v in enumerate(names)}
            values[c.name] = (np.array([index.get(v, -1) for v in col], np.int64), None, names)
        elif c.sql.startswith("BOOLEAN"):
            values[c.name] = (np.array([bool(v) for v in col]), np.array([v is None for v in col]))
        else:
            values[c.name] = (np.array([v if v is not None else 0 for v in col], np.int64),
                              np.array([v is None for v in col]))
    return numpy_table(TLS_MESSAGES, values)


def _from_file(con, capture_id, path, fmt, size, out):
    """A store from before ingest kept payloads: find the connections that open
    with a TLS record and read their first 64 KiB back from the capture file."""
    firsts = con.execute(FIRST_SEGMENTS_SQL, {"capture_id": capture_id}).fetchall()
    missing = [r for r in firsts if r[4] is None]
    flows = {r[0] for r in firsts if r[4] is not None and r[4][:2] == b"\x16\x03"}
    if missing:
        _check_file(path, size)
        opens = _opens_tls(path, fmt, np.array([r[1] for r in missing], np.int64),
                           np.array([r[2] for r in missing], np.int64),
                           np.array([r[3] for r in missing], np.int64))
        flows |= {r[0] for r, tls in zip(missing, opens) if tls}
    flows = sorted(flows)
    if not flows:
        return
    rows = con.execute(SEGMENTS_SQL, {"capture_id": capture_id, "limit": MAX_STREAM,
                                      "flows": flows}).fetchall()
    payloads = [r[9] for r in rows]
    gaps = [i for i, p in enumerate(payloads) if p is None]
    if gaps:
        _check_file(path, size)
        read = _payloads(path, fmt, np.array([rows[i][6] for i in gaps], np.int64),
                         np.array([-1 if rows[i][7] is None else rows[i][7] for i in gaps],
                                  np.int64),
                         np.array([rows[i][8] for i in gaps], np.int64))
        for i, p in zip(gaps, read):
            payloads[i] = p
    per = {}
    for r, payload in zip(rows, payloads):
        per.setdefault((r[0], r[1]), []).append((r[4], bytes(payload), r[2], r[3]))
    for flow in flows:
        _flow_rows(out, capture_id, flow, per)


def _flow_rows(out, capture_id, flow, per):
    tls13 = [False]
    parsed = []
    # the server's stream first decides whether TLS 1.3 was negotiated
    for client in (False, True):
        stream = Direction(per.get((flow, client), []))
        rows, complete = parse_direction(stream, client, tls13)
        parsed.append((client, stream, rows, complete))
    hellos = {r[0]: r[5] for _, _, rows, _ in parsed for r in rows
              if r[0] in ("client_hello", "server_hello")}
    ch, sh = hellos.get("client_hello", {}), hellos.get("server_hello", {})
    # resumption: a TLS 1.3 ServerHello accepting a PSK, or a TLS 1.2 one echoing
    # the client's non-empty session id (RFC 5246 sec. 7.4.1.3)
    resumed = bool(sh) and (sh.get("psk") or (sh.get("version", 0) <= 0x0303
                                              and len(ch.get("session_id", b"")) > 0
                                              and ch.get("session_id") == sh.get("session_id")))
    for client, stream, rows, complete in parsed:
        for k, (name, first, last, ctype, length, f) in enumerate(rows):
            if name == "application_data" and tls13[0]:
                name = "encrypted"  # TLS 1.3 hides handshake messages and data alike
            first_frame, _ = stream.at(first)
            frame, ts = stream.at(last)
            version = f.get("version")
            offered = f.get("versions")
            out["capture_id"].append(capture_id)
            out["flow_id"].append(flow)
            out["direction"].append("c2s" if client else "s2c")
            out["message"].append(name)
            out["stream_offset"].append(first)
            out["first_frame"].append(first_frame)
            out["frame"].append(frame)
            out["ts_ns"].append(ts)
            out["record_type"].append(CONTENT[ctype])
            out["version"].append(VERSIONS.get(version))
            out["offered_versions"].append(
                ",".join(VERSIONS[v] for v in offered if v in VERSIONS) if offered else None)
            out["sni"].append(f.get("sni"))
            out["alpn"].append(f.get("alpn"))
            out["psk"].append(f.get("psk") if name in ("client_hello", "server_hello") else None)
            out["early_data"].append(f.get("early_data") if name == "client_hello" else None)
            out["resumed"].append(resumed if name == "server_hello" else None)
            out["complete"].append(complete or k < len(rows) - 1)

