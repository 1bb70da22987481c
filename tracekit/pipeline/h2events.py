"""HTTP/2 frames placed in the TCP byte stream, as tracekit's stream events.

`tracekit h2-events CAPTURE --port P` reads a capture of cleartext HTTP/2
(h2c, prior knowledge), or with `--keylog` of HTTP/2 in TLS 1.3 (decrypted
by tracekit/pipeline/tls13.py; the offsets are then the decrypted byte
stream's, each byte timed by its record), with tracekit's own readers, puts each direction's
TCP payload in sequence order (the first copy of each byte; a byte never
captured leaves the rest of that direction unparsed), cuts it into HTTP/2
frames (a 9-byte header: 24-bit length, type, flags, 31-bit stream id) and
writes one event per frame (docs/guide.md, stream events):

- a DATA frame: `stream_sent` or `stream_arrived` (the capture's vantage
  says which: at the client, c2s frames were sent and s2c frames arrived),
  `stream_id`, `offset`/`length` (its data bytes within the stream, padding
  left out), `conn_offset`/`conn_length` (the whole frame's place in the TCP
  byte stream, relative to the first byte seen);
- every other frame and the client's connection preface: the same with
  `conn_only` true (it holds the connection's byte stream, no stream's data);
- `fin` true on a DATA or HEADERS frame with END_STREAM (the stream's last
  frame), `reset` true on RST_STREAM, and `ends` true on every event (these
  events mark streams' ends: logs written before they did have no `ends`):
  the `streams` table calls a stream complete only when its end was seen.

A direction's byte stream is read from its SYN, or from its start when
that is the client's connection preface or a SETTINGS frame (the server's
preface, RFC 9113, 3.4); else (a capture that begins mid-connection) frames cannot
be found in it and it is left out. What cannot be read is said in `notes`
(each a line naming the capture): a direction left out, a byte never
captured (the rest of the direction after it is not read), payloads cut by
the capture's snaplen.

Its time is when its last byte was first seen (`first_ts`: its first byte) (the latest first copy of its
bytes): for the receiver, when it had all arrived, before TCP's in-order
delivery; for the sender, when it had all left. So a frame behind a hole
keeps its own arrival time, and the `streams` table's connection order
(analyses/streams.sql) computes when it could be delivered.
"""

import json

import numpy as np

from ..core.errors import TracekitError
from ..readers.capture.formats import open_capture
from .reading import decoded_batches

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SYN = 0x02
END_STREAM = 0x01
PADDED = 0x08
DATA, HEADERS, RST_STREAM, SETTINGS = 0, 1, 3, 4


def _segments(path, port):
    """{(client?, flow key): [(ts_ns, seq, payload, syn)]} of the TCP segments to/from port
    (a payload cut by the snaplen: its captured bytes, and the key counted in `cut`)."""
    out, cut = {}, {}
    with open(path, "rb") as f:
        reader = open_capture(path, f)
        for batch, _link, cols in decoded_batches(reader):
            tcp = np.nonzero(cols["is_tcp"] & (cols["status"] == 0))[0]
            for i in tcp.tolist():
                src, dst = int(cols["src_port"][i]), int(cols["dst_port"][i])
                if port not in (src, dst):
                    continue
                n = int(cols["payload_bytes"][i])
                syn = bool(cols["tcp_flags"][i] & SYN)
                if n <= 0 and not syn:
                    continue
                start = int(batch.data_offset[i] + cols["l4"][i] + cols["tcp_header_bytes"][i])
                end = int(batch.data_offset[i] + batch.captured_bytes[i])
                payload = batch.data[start:min(start + max(n, 0), end)].tobytes()
                client = dst == port
                peer = src if client else dst
                key = (client, peer, (int(cols["src_hi"][i]) ^ int(cols["dst_hi"][i]),
                                      int(cols["src_lo"][i]) ^ int(cols["dst_lo"][i])))
                out.setdefault(key, []).append((int(batch.ts_ns[i]), int(cols["tcp_seq"][i]),
                                                payload, syn))
                if len(payload) < max(n, 0):
                    cut[key] = cut.get(key, 0) + 1
    return out, cut


def byte_stream(segments):
    """(bytes, first-seen time per byte, contiguous length, from its SYN?) of one
    direction: positions relative to the SYN's sequence + 1, else to the first segment's."""
    base = next((seq + 1 for _, seq, _, syn in segments if syn), None)
    from_syn = base is not None
    if base is None:
        base = segments[0][1]
    spans = []
    for ts, seq, payload, _ in segments:
        rel = (seq - base) % (1 << 32)
        if rel >= 1 << 31 or not payload:   # before the start, or no data
            continue
        spans.append((ts, rel, payload))
    size = max((rel + len(p) for _, rel, p in spans), default=0)
    data = np.zeros(size, np.uint8)
    seen = np.full(size, -1, np.int64)
    for ts, rel, p in spans:
        part = seen[rel:rel + len(p)]
        new = part < 0
        data[rel:rel + len(p)][new] = np.frombuffer(p, np.uint8)[new]
        part[new] = ts
    missing = np.nonzero(seen < 0)[0]
    return data.tobytes(), seen, int(missing[0]) if len(missing) else size, from_syn


def _starts(streams):
    """{client?: does the direction's byte stream begin where HTTP/2 does}: at its SYN; the
    client's at its preface; the server's at a SETTINGS frame that is no ACK (its preface),
    and only beside a client's direction that begins (a SETTINGS ACK, or a later SETTINGS,
    is no start)."""
    out = {}
    client = streams.get(True)
    out[True] = client is not None and (client[3] or client[0].startswith(PREFACE))
    server = streams.get(False)
    if server is not None:
        data = server[0]
        out[False] = server[3] or out[True] and len(data) >= 9 and data[3] == SETTINGS \
            and not data[4] & 1 and int.from_bytes(data[5:9], "big") == 0 \
            and int.from_bytes(data[:3], "big") % 6 == 0
    return out


def frames(data, seen, contiguous, at=0):
    """[(conn_offset, frame bytes, type, flags, stream id, data offset in frame, data length,
    first byte's time, time)]: the times its first and its last byte were first seen."""
    out = []
    if data.startswith(PREFACE):
        out.append((0, len(PREFACE), None, 0, 0, 0, 0, int(seen[:len(PREFACE)].min()),
                    int(seen[:len(PREFACE)].max())))
        at = len(PREFACE)
    while at + 9 <= contiguous:
        length = int.from_bytes(data[at:at + 3], "big")
        typ, flags = data[at + 3], data[at + 4]
        stream = int.from_bytes(data[at + 5:at + 9], "big") & 0x7FFFFFFF
        end = at + 9 + length
        if end > contiguous:
            break
        skip = pad = 0
        if typ == 0 and flags & PADDED and length:
            skip, pad = 1, data[at + 9]
        out.append((at, 9 + length, typ, flags, stream, 9 + skip, max(0, length - skip - pad),
                    int(seen[at:end].min()), int(seen[at:end].max())))
        at = end
    return out


def _tls_streams(streams, keylog, path):
    """{client?: (plaintext, times, length)} of one connection's two directions."""
    from .tls13 import LABELS, UndecryptableRecord, hello, plaintext
    client_random = hello(*_ends(streams.get(True)), client=True)
    suite = hello(*_ends(streams.get(False)), client=False)
    if client_random is None or suite is None:
        raise TracekitError(f"{path}: a connection without its TLS 1.3 ClientHello and "
                            f"ServerHello in the capture cannot be decrypted")
    out = {}
    for client, (data, seen, contiguous, _from_syn) in streams.items():
        secrets = [keylog.get((label, client_random)) for label in LABELS[client]]
        if secrets[1] is None:
            raise TracekitError(f"{path}: the key log has no {LABELS[client][1]} for client "
                                f"random {client_random.hex()[:16]}...")
        try:
            out[client] = plaintext(data, seen, contiguous, secrets, suite)
        except UndecryptableRecord as exc:
            side = "client" if client else "server"
            raise TracekitError(f"{path}: the {side}'s TLS record at byte {exc.args[0]} of its TCP "
                                f"byte stream does not decrypt with the key log's secrets for client "
                                f"random {client_random.hex()[:16]}... (another key log, or a key "
                                f"update tracekit does not follow)") from None
    return out


def _ends(stream):
    return (b"", 0) if stream is None else (stream[0], stream[2])


def h2_events(path, port, vantage="client", connection=None, run=None, keylog=None, notes=None):
    """The stream events (dicts) of every HTTP/2 connection to `port` in a capture;
    with `keylog` (a path), HTTP/2 in TLS 1.3, decrypted (tracekit/pipeline/tls13.py).
    What could not be read is appended to `notes` (a list), a line each."""
    notes = [] if notes is None else notes
    if vantage not in ("client", "server"):
        raise TracekitError(f"vantage must be client or server, not {vantage!r}")
    keys = None
    if keylog is not None:
        from .tls13 import read_keylog
        keys = read_keylog(keylog)
    conns = {}
    segments, cuts = _segments(path, port)
    for (client, peer, addrs), segs in segments.items():
        conns.setdefault((peer, addrs), {})[client] = byte_stream(segs)
    events = []
    for (peer, addrs), streams in sorted(conns.items(), key=lambda kv: kv[0][0]):
        name = connection or f"h2:{peer}"
        cut = {client: cuts.get((client, peer, addrs), 0) for client in streams}
        starts = _starts(streams) if keys is None else dict.fromkeys(streams, True)
        _note_holes(notes, path, name, streams, starts, cut)
        if keys is not None:  # (TLS: its handshake says where it starts)
            streams = _decrypted(streams, keys, path, cut)
        for client, (data, seen, contiguous, *_) in sorted(streams.items()):
            if starts[client]:
                events += _frame_events(data, seen, contiguous, client, vantage, name, run)
    return sorted(events, key=lambda e: e["ts"])


def _note_holes(notes, path, name, streams, starts, cut):
    """A line in `notes` for each direction of a connection that cannot be read whole:
    one that does not start in the capture (left out), one with a byte never captured."""
    for client, (data, _seen, contiguous, *_) in sorted(streams.items()):
        side = "client's" if client else "server's"
        if not starts[client]:
            notes.append(f"{path}: connection {name}: the {side} byte stream does not start in "
                         f"the capture (no SYN, no HTTP/2 preface): its frames cannot be found; "
                         f"left out")
        elif contiguous < len(data):
            why = (f" ({cut[client]} of its segments cut by the capture's snaplen: h2-events "
                   f"needs whole payloads)") if cut[client] else ""
            notes.append(f"{path}: connection {name}: byte {contiguous} of the {side} TCP byte "
                         f"stream was never captured{why}; the {len(data) - contiguous} bytes "
                         f"after it are not read (their frames are left out)")


def _decrypted(streams, keys, path, cut):
    """_tls_streams, its error naming payloads the snaplen cut (a hello cut short)."""
    try:
        return _tls_streams(streams, keys, path)
    except TracekitError as e:
        if not any(cut.values()):
            raise
        raise TracekitError(f"{e} ({sum(cut.values())} segments of the connection were cut by "
                            f"the capture's snaplen: h2-events needs whole payloads)") from None


def _frame_events(data, seen, contiguous, client, vantage, name, run):
    direction = "c2s" if client else "s2c"
    sent = (vantage == "client") == client
    offsets, events = {}, []
    for conn_off, size, typ, flags, stream, _skip, n, first, ts in frames(data, seen, contiguous):
        ev = {"ts": ts, "first_ts": first, "kind": "stream_sent" if sent else "stream_arrived",
              "connection": name, "direction": direction, "stream_id": str(stream),
              "conn_offset": conn_off, "conn_length": size, "h2_type": typ, "ends": True}
        if typ in (DATA, HEADERS) and flags & END_STREAM:
            ev["fin"] = True
        elif typ == RST_STREAM:
            ev["reset"] = True
        if typ == DATA:
            ev.update(offset=offsets.get(stream, 0), length=n)
            offsets[stream] = offsets.get(stream, 0) + n
        else:
            ev.update(offset=0, length=0, conn_only=True)
        if run is not None:
            ev["run"] = run
        events.append(ev)
    return events


def write_h2_events(path, port, out, vantage="client", connection=None, run=None, keylog=None,
                    notes=None):
    """Write h2_events as JSON Lines to `out`; returns how many."""
    events = h2_events(path, port, vantage, connection, run, keylog, notes)
    with open(out, "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in events)
    return len(events)
