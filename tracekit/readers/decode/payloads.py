"""The TCP payload bytes later analyses need, kept at ingest: the store is
self-contained (rename or delete the capture file and every analysis still runs).

What is kept: the captured payload of each segment that starts in the first
64 KiB of its direction's sequence space (from the SYN's sequence number + 1,
else the first segment seen) on a connection whose client's first segment with
data opens like a TLS handshake record (0x16 0x03), and beyond 64 KiB for as
long as the direction's records are still plaintext handshake records. That
is what `tls_messages` reads (transport/tls.py); other connections cost
nothing. A connection's server data seen before the client's first data is
not kept (a TLS client speaks first).

Long handshakes (a TLS 1.2 server's certificate chain past 64 KiB): each
direction's record headers are followed through its kept segments (type,
2-byte length; a header split between two segments is completed from the
next), and the kept region reaches the next header for as long as every
record so far is a handshake, change-cipher-spec or alert record. The first
application-data record (TLS 1.3 encrypts right after the ServerHello), kept
whole, or a header that is no TLS record ends the following, and with it the
region at the larger of 64 KiB and where that record ended; a segment seen out of
order may end it early (the region is then 64 KiB or more, as before). No
region passes MAX_REGION, whatever the records claim.

A connection that starts in plaintext and upgrades (STARTTLS in SMTP, IMAP,
POP3, FTP, XMPP...) is kept from the upgrade on: a client segment within
its first 64 KiB that opens a TLS record holding a ClientHello (0x16 0x03
0x00-0x04, length, type 1) starts its direction's kept region, and the
server's first segment after it that opens a TLS handshake record starts
the server's; each region is 64 KiB.

State crosses batches in arrays indexed by the flow's row in the flow table
(decode/flows.py), renumbered with it when flows leave (`moved`); each batch
is a few numpy passes plus one slice per kept segment.
"""

import numpy as np
import pyarrow as pa

WINDOW = 65536  # bytes of each direction kept at least
MAX_REGION = 1 << 20  # and at most, however long the handshake claims to be
RECORD_TYPES = (0x14, 0x15, 0x16)  # change_cipher_spec, alert, handshake: still plaintext
SYN = 0x02
UNKNOWN, TLS, OTHER, UPGRADED = 0, 1, 2, 3


class PayloadKeeper:
    def __init__(self):
        self.state = np.zeros(0, np.int8)  # per flow: UNKNOWN, TLS, OTHER, UPGRADED
        self.base = np.zeros((0, 2), np.int64)  # per flow and direction (0 client): seq, -1 unknown
        self.start = np.zeros((0, 2), np.int64)  # UPGRADED: where each direction's TLS begins
        # per flow and direction: the next record header's offset in the region
        # (-1: not followed), and how far into the region segments are kept
        # (both under MAX_REGION: int32)
        self.next_record = np.zeros((0, 2), np.int32)
        self.horizon = np.zeros((0, 2), np.int32)
        self.partial = {}  # (flow, side) -> the first bytes of a header split across segments
        self.kept = 0

    def _room(self, n, data=False):
        """Rows for flow rows up to n, grown in place by an eighth at least, as
        the flow table's: `state` and `base` (17 bytes a flow) for every flow
        with a TCP segment, the rest (32 bytes) only as far as a flow with
        data needs them (a scan's flows never do)."""
        names = ("start", "next_record", "horizon") if data else ("state", "base")
        old = len(getattr(self, names[0]))
        if n > old:
            cap = max(n, old + old // 8, 1024)
            for name in names:
                a = getattr(self, name)
                a.resize((cap,) + a.shape[1:], refcheck=False)
                a[old:] = self.FILL[name]

    FILL = {"state": UNKNOWN, "base": -1, "start": -1, "next_record": 0, "horizon": WINDOW}

    def moved(self, new_row):
        """The flow table renumbered its rows: row r is now new_row[r] (-1: gone)."""
        self._room(len(new_row))
        keep = np.flatnonzero(new_row >= 0)
        for name in ("state", "base", "start", "next_record", "horizon"):
            a = getattr(self, name)  # (rows kept that it covers: a prefix of keep)
            setattr(self, name, a[keep[keep < len(a)]])
        self.partial = {(int(new_row[f]), side): head for (f, side), head in self.partial.items()
                        if new_row[f] >= 0}

    def _upgrades(self, batch, idx, f, s, rel, pos, got, seq):
        """STARTTLS: a plaintext connection (OTHER) whose client opens a TLS
        ClientHello record within its first WINDOW bytes becomes UPGRADED; the
        server's first handshake record after it starts the server's region.
        Only those candidates' first bytes are read (most segments are none)."""
        client = np.flatnonzero((s == 0) & (self.state[f] == OTHER) & (rel < WINDOW))
        hello_at = np.full(len(self.state), -1, np.int64)  # this batch's upgrades
        if len(client):
            _, hello = _opens_record(batch, pos[client], got[client])
            if hello.any():
                at = client[_first_per_flow(f[client], hello)]
                self.state[f[at]] = UPGRADED
                self.start[f[at], 0] = seq[at]
                self.start[f[at], 1] = -1
                hello_at[f[at]] = at
        server = np.flatnonzero((s == 1) & (self.state[f] == UPGRADED) & (self.start[f, 1] < 0))
        # a server segment counts only after the client's ClientHello
        server = server[server > hello_at[f[server]]]
        if len(server):
            record, _ = _opens_record(batch, pos[server], got[server])
            if record.any():
                at = server[_first_per_flow(f[server], record)]
                self.start[f[at], 1] = seq[at]

    def batch(self, capture_id, batch, cols, flow_id, from_client):
        """Arrow table (capture_id, frame, payload) of this batch's kept segments, or
        None. `flow_id`: each packet's flow row (-1: none)."""
        tcp = cols["is_tcp"] & (flow_id >= 0) & cols["tcp_ok"]
        if not tcp.any():
            return None
        self._room(int(flow_id[tcp].max()) + 1)
        seq = cols["tcp_seq"].astype(np.int64)
        side = np.where(from_client, 0, 1)
        # the SYN (or SYN-ACK) fixes its direction's base
        syn = tcp & ((cols["tcp_flags"] & SYN) != 0)
        if syn.any():
            self.base[flow_id[syn], side[syn]] = (seq[syn] + 1) & 0xFFFFFFFF
        # where the payload starts in the record, and how much of it was captured
        start = cols["l4"] + cols["tcp_header_bytes"].astype(np.int64)
        got = np.clip(np.minimum(cols["payload_bytes"], batch.captured_bytes - start), 0, None)
        data = tcp & (cols["payload_bytes"] > 0)
        idx = np.flatnonzero(data)
        if not len(idx):
            return None
        f, s = flow_id[idx], side[idx]
        self._room(int(f.max()) + 1, data=True)
        # first data segment of a direction without a SYN seen: its base
        unknown = self.base[f, s] < 0
        if unknown.any():
            keys = f[unknown] * 2 + s[unknown]
            _, first = np.unique(keys, return_index=True)
            at = idx[unknown][first]
            self.base[flow_id[at], side[at]] = seq[at]
        pos = batch.data_offset[idx] + start[idx]
        # the client's first data segment decides the connection
        undecided = (s == 0) & (self.state[f] == UNKNOWN)
        if undecided.any():
            at = _first_per_flow(f, undecided)
            two = got[idx[at]] >= 2
            tls = (_byte(batch, pos[at], two) == 0x16) & (_byte(batch, pos[at] + 1, two) == 0x03)
            self.state[f[at]] = np.where(tls, TLS, OTHER)
        rel = (seq[idx] - self.base[f, s]) & 0xFFFFFFFF
        self._upgrades(batch, idx, f, s, rel, pos, got[idx], seq[idx])
        up = self.state[f] == UPGRADED
        # each segment's offset in its direction's kept region
        region = np.where(up, (seq[idx] - self.start[f, s]) & 0xFFFFFFFF, rel)
        inside = ((self.state[f] == TLS) | (up & (self.start[f, s] >= 0))) & (got[idx] > 0)
        wanted = inside & (region < self.horizon[f, s])
        followed = inside & (self.next_record[f, s] >= 0)
        if followed.any():
            self._follow(batch, np.flatnonzero(followed), f, s, region, pos, got[idx], wanted)
        keep = idx[wanted]
        if not len(keep):
            return None
        begin = batch.data_offset[keep] + start[keep]
        length = got[keep]
        offsets = np.zeros(len(keep) + 1, np.int64)
        np.cumsum(length, out=offsets[1:])
        values = np.concatenate([batch.data[b:b + n] for b, n in
                                 zip(begin.tolist(), length.tolist())])
        self.kept += len(keep)
        payload = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(keep), [None, pa.py_buffer(offsets), pa.py_buffer(values)])
        # (arrays from numpy buffers: pyarrow's array() imports pandas, ~0.7 s)
        return pa.table({
            "capture_id": pa.Array.from_buffers(pa.int32(), len(keep), [
                None, pa.py_buffer(np.full(len(keep), capture_id, np.int32))]),
            "frame": pa.Array.from_buffers(pa.int64(), len(keep), [
                None, pa.py_buffer(batch.first_frame + keep.astype(np.int64))]),
            "payload": payload.cast(pa.binary())})

    def _follow(self, batch, which, f, s, region, pos, got, wanted):
        """Follow the record headers of the directions still in their handshake
        through this batch's segments, in capture order, extending the region
        (and `wanted`) as long as the records stay plaintext."""
        data = batch.data
        for k in which.tolist():
            fk, sk = int(f[k]), int(s[k])
            r, g, p = int(region[k]), int(got[k]), int(pos[k])
            horizon = int(self.horizon[fk, sk])
            wanted[k] = r < horizon
            nr = int(self.next_record[fk, sk])
            if nr < 0 or not wanted[k]:
                continue  # (following ended earlier in this batch)
            head = self.partial.pop((fk, sk), b"")
            if head and r != nr + len(head):
                head = b""  # not the continuation: look for the header afresh
            while nr >= 0 and (head or r <= nr < r + g):
                at = nr + len(head) - r  # where this segment's part of the header starts
                head += data[p + at:p + min(g, at + 5 - len(head))].tobytes()
                if len(head) < 5:
                    self.partial[(fk, sk)] = head
                    break
                if head[0] not in RECORD_TYPES or head[1] != 0x03:
                    if head[0] == 0x17 and head[1] == 0x03:  # the first encrypted record, whole
                        end = nr + 5 + int.from_bytes(head[3:5], "big")
                        horizon = max(horizon, min(end, MAX_REGION))
                    nr = -1  # encrypted from here (or not TLS): stop following
                    break
                nr += 5 + int.from_bytes(head[3:5], "big")
                head = b""
                horizon = max(horizon, min(nr + 5, MAX_REGION))
            self.next_record[fk, sk] = nr if nr < MAX_REGION else -1
            self.horizon[fk, sk] = horizon


def _byte(batch, pos, ok):
    return np.where(ok, batch.data[np.where(ok, pos, 0)], -1)


def _opens_record(batch, pos, got):
    """Which payloads start like a TLS handshake record (0x16 0x03 0x00-0x04),
    and which of those hold a ClientHello (handshake type 1 at byte 5)."""
    record = ((_byte(batch, pos, got >= 3) == 0x16) & (_byte(batch, pos + 1, got >= 3) == 0x03)
              & (_byte(batch, pos + 2, got >= 3) <= 0x04))
    return record, record & (_byte(batch, pos + 5, got >= 6) == 0x01)


def _first_per_flow(flows, candidates):
    """Positions (into `flows`) of each flow's first candidate."""
    at = np.flatnonzero(candidates)
    _, first = np.unique(flows[at], return_index=True)
    return at[first]
