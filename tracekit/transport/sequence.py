"""Build `tcp_analysis` for one capture: two readings of every TCP packet.

The packets of a capture are read in frame order as numpy columns; the
kernel of wireshark.py (Wireshark's verdicts, for comparison) and then the
kernel of segments.py (tracekit's own, which the analyses use) each run over
them once, compiled when the capture is large; the result is stored as one
row per TCP packet.
"""

import numpy as np

from ..jit import PYTHON_COST, use_jit
from ..store.arrow import numpy_table
from ..store.schema import TCP_ANALYSIS
from . import segments as sg
from . import wireshark as ws

SOURCES = (ws, sg)  # code whose change rebuilds the table
DUPTHRESH = 3
RTO_MIN_NS = 200_000_000  # Linux's TCP_RTO_MIN
REORDER_WINDOW_NS = 3_000_000
TH_ACK = 0x10
M32 = 0xFFFFFFFF

# TCP packets that carry a full header and belong to a flow, in capture order
PACKETS_SQL = """
SELECT frame, ts_ns, flow_id, from_client, tcp_seq, tcp_ack, tcp_flags,
       payload_bytes, tcp_window, tcp_window_shift, coalesce(tcp_tsval, -1) AS tsval,
       coalesce(tcp_tsecr, -1) AS tsecr, coalesce(ip_id, -1) AS ip_id,
       tcp_sack_left, tcp_sack_right
FROM packets
WHERE capture_id = $capture_id AND protocol = 6 AND flow_id IS NOT NULL
  AND tcp_flags IS NOT NULL
ORDER BY frame
"""


def _blocks(column):
    """A list<uint32> Arrow column -> (count per row, (n, 4) int64 edges)."""
    column = column.combine_chunks()
    n = len(column)
    edges = np.zeros((n, 4), np.int64)
    offsets = column.offsets.to_numpy()
    values = column.values.to_numpy(zero_copy_only=False).astype(np.int64)
    count = np.diff(offsets)
    if column.null_count:
        count = np.where(column.is_null().to_numpy(zero_copy_only=False), 0, count)
    for k in range(4):
        rows = np.nonzero(count > k)[0]
        edges[rows, k] = values[offsets[rows] + k]
    return count.astype(np.int64), edges


def read_tcp(con, capture_id):
    """The capture's TCP packets as int64 numpy columns (SACK edges as (n, 4))."""
    table = con.sql(PACKETS_SQL, params={"capture_id": capture_id}).to_arrow_table()
    out = {}
    for name in table.column_names:
        if name.startswith("tcp_sack"):
            continue
        col = table.column(name).to_numpy()
        out[name] = col.astype(bool if name == "from_client" else np.int64)
    out["sack_n"], out["sack_l"] = _blocks(table.column("tcp_sack_left"))
    _, out["sack_r"] = _blocks(table.column("tcp_sack_right"))
    return out


def relative_sack(p, w):
    """SACK edges in the acknowledged side's relative (64-bit) sequence space:
    each edge is the number nearest to the packet's relative ACK with the
    edge's low 32 bits (RFC 1982), so blocks that straddle 2^32 stay whole."""
    ack32 = p["tcp_ack"][:, None] & M32
    rel_ack = w["rel_ack"][:, None]
    out = []
    for raw in (p["sack_l"], p["sack_r"]):
        d = (raw - ack32) & M32
        out.append(rel_ack + np.where(d >= 1 << 31, d - (1 << 32), d))
    return out


def wireshark_analysis(p):
    """Run the Wireshark state machine over read_tcp()'s columns; dict of outputs."""
    n = len(p["frame"])
    nflows = int(p["flow_id"].max()) + 1 if n else 0
    out = {"ws_flags": np.zeros(n, np.int64)}
    for name in ("bif", "acks_frame", "ack_rtt", "dupack_num", "dupack_frame", "rto", "rto_frame",
                 "rel_seq", "rel_ack"):
        out[name] = np.full(n, -1, np.int64)
    ws.analyze(use_jit(n * PYTHON_COST), p["frame"], p["ts_ns"], p["flow_id"], p["from_client"],
               p["tcp_seq"], p["tcp_ack"], p["tcp_flags"], p["payload_bytes"], p["tcp_window"],
               p["tcp_window_shift"], p["sack_n"], p["sack_l"], p["sack_r"], nflows,
               out["ws_flags"], out["bif"], out["acks_frame"], out["ack_rtt"], out["dupack_num"],
               out["dupack_frame"], out["rto"], out["rto_frame"], out["rel_seq"], out["rel_ack"])
    return out


def tracekit_analysis(p, w, dupthresh=DUPTHRESH, rto_min_ns=RTO_MIN_NS,
                      reorder_window_ns=REORDER_WINDOW_NS):
    """Run segments.classify over read_tcp()'s columns and the Wireshark pass's
    relative numbers; dict of outputs."""
    n = len(p["frame"])
    nflows = int(p["flow_id"].max()) + 1 if n else 0
    sack_l, sack_r = relative_sack(p, w)
    out = {}
    for name in ("seg_class", "gap_bytes", "trigger", "spurious", "inflight", "dsack", "flight"):
        out[name] = np.zeros(n, np.int64)
    for name in ("silence", "peer_dupacks", "peer_inflight", "acked", "rtt", "ts_rtt",
                 "acked_segments", "ack_delay"):
        out[name] = np.full(n, -1, np.int64)
    sg.classify(use_jit(n * PYTHON_COST), p["ts_ns"], p["flow_id"], p["from_client"], w["rel_seq"],
                w["rel_ack"], p["tcp_flags"], p["payload_bytes"], p["tsval"], p["tsecr"],
                p["ip_id"], p["sack_n"], sack_l, sack_r, nflows, dupthresh, rto_min_ns,
                reorder_window_ns, out["seg_class"], out["gap_bytes"], out["trigger"],
                out["silence"], out["peer_dupacks"], out["spurious"], out["inflight"],
                out["peer_inflight"], out["acked"], out["rtt"], out["ts_rtt"], out["dsack"],
                out["flight"], out["acked_segments"], out["ack_delay"])
    return out


def tcp_analysis_table(capture_id, p, w, t):
    """The `tcp_analysis` rows of one capture as an Arrow table."""
    n = len(p["frame"])
    flags = w["ws_flags"]
    retrans = ws.RETRANSMISSION | ws.FAST_RETRANSMISSION | ws.SPURIOUS_RETRANSMISSION

    def bit(mask):
        return ((flags & mask) != 0, None)

    def opt(name):
        return (w[name], w[name] < 0)

    values = {
        "capture_id": (np.full(n, capture_id, np.int32), None),
        "frame": (p["frame"], None),
        "flow_id": (p["flow_id"], None),
        "from_client": (p["from_client"], None),
        "ts_ns": (p["ts_ns"], None),
        "rel_seq": (w["rel_seq"], None),
        "rel_ack": (w["rel_ack"], (p["tcp_flags"] & TH_ACK) == 0),
        "payload_bytes": (p["payload_bytes"].astype(np.int32), None),
        "rel_end": (w["rel_seq"] + p["payload_bytes"] + ((p["tcp_flags"] & 0x03) != 0), None),
        "ws_retransmission": bit(retrans),
        "ws_duplicate_ack_num": (w["dupack_num"].astype(np.int32), w["dupack_num"] < 0),
        "ws_duplicate_ack_frame": opt("dupack_frame"),
        "ws_bytes_in_flight": opt("bif"),
        "ws_acks_frame": opt("acks_frame"),
        "ws_ack_rtt_ns": opt("ack_rtt"),
        "ws_rto_ns": opt("rto"),
        "ws_rto_frame": opt("rto_frame"),
    }
    for mask, name in ws.FLAG_NAMES.items():
        if mask != ws.RETRANSMISSION:
            values[f"ws_{name}"] = bit(mask)
    cls = t["seg_class"]
    resent = (cls == sg.REPEAT) | (cls == sg.HOLE_FILL)
    values.update({
        "segment": (cls - 1, None, sg.SEG_CLASS[1:]),
        "gap_bytes": (t["gap_bytes"], cls != sg.NEW),
        "retransmission_trigger": (np.where(resent, t["trigger"] - 1, -1), None, sg.TRIGGER[1:]),
        "silence_before_ns": (t["silence"], ~resent),
        "peer_dupacks": (t["peer_dupacks"].astype(np.int32), ~resent),
        "spurious": (t["spurious"] != 0, ~resent),
        "dsack": (t["dsack"] != 0, None),
        "inflight_bytes": (t["inflight"], None),
        "peer_inflight_bytes": (t["peer_inflight"], t["peer_inflight"] < 0),
        "acked_bytes": (t["acked"], t["acked"] < 0),
        "rtt_ns": (t["rtt"], t["rtt"] < 0),
        "ts_rtt_ns": (t["ts_rtt"], t["ts_rtt"] < 0),
        "flight": (t["flight"], t["flight"] == 0),
        "acked_segments": (t["acked_segments"], t["acked_segments"] < 0),
        "ack_delay_ns": (t["ack_delay"], t["ack_delay"] < 0),
    })
    return numpy_table(TCP_ANALYSIS, values)


PARAMETERS = {"dupthresh": DUPTHRESH, "rto_min_ns": RTO_MIN_NS,
              "reorder_window_ns": REORDER_WINDOW_NS}


def build(con, capture_id, dupthresh=DUPTHRESH, rto_min_ns=RTO_MIN_NS,
          reorder_window_ns=REORDER_WINDOW_NS):
    """Arrow table of `tcp_analysis` for one capture."""
    p = read_tcp(con, capture_id)
    w = wireshark_analysis(p)
    t = tracekit_analysis(p, w, dupthresh, rto_min_ns, reorder_window_ns)
    return tcp_analysis_table(capture_id, p, w, t)
