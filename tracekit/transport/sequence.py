"""Build `tcp_analysis` for one capture: Wireshark's verdicts on every TCP packet.

The packets of a capture are read in frame order as numpy columns, the
kernel of wireshark.py runs over them once (compiled when the capture is
large), and the result is stored as one row per TCP packet.
"""

import numpy as np

from ..jit import use_jit
from ..store.arrow import numpy_table
from ..store.schema import TCP_ANALYSIS
from . import wireshark as ws

SOURCES = (ws,)  # code whose change rebuilds the table
TH_ACK = 0x10

# TCP packets that carry a full header and belong to a flow, in capture order
PACKETS_SQL = """
SELECT frame, ts_ns, flow_id, from_client, tcp_seq, tcp_ack, tcp_flags,
       payload_bytes, tcp_window, tcp_window_shift,
       coalesce(len(tcp_sack_left), 0) AS sack_n,
       coalesce(tcp_sack_left[1], 0) AS l1, coalesce(tcp_sack_right[1], 0) AS r1,
       coalesce(tcp_sack_left[2], 0) AS l2, coalesce(tcp_sack_right[2], 0) AS r2,
       coalesce(tcp_sack_left[3], 0) AS l3, coalesce(tcp_sack_right[3], 0) AS r3,
       coalesce(tcp_sack_left[4], 0) AS l4, coalesce(tcp_sack_right[4], 0) AS r4
FROM packets
WHERE capture_id = $capture_id AND protocol = 6 AND flow_id IS NOT NULL
  AND tcp_flags IS NOT NULL
ORDER BY frame
"""


def read_tcp(con, capture_id):
    """The capture's TCP packets as int64 numpy columns (SACK edges as (n, 4))."""
    cols = {k: np.asarray(v) for k, v in
            con.execute(PACKETS_SQL, {"capture_id": capture_id}).fetchnumpy().items()}
    edges = {side: np.stack([cols.pop(f"{side}{k}").astype(np.int64) for k in range(1, 5)], 1)
             for side in "lr"}
    out = {k: v.astype(bool if k == "from_client" else np.int64) for k, v in cols.items()}
    out["sack_l"], out["sack_r"] = edges["l"], edges["r"]
    return out


def wireshark_analysis(p):
    """Run the Wireshark state machine over read_tcp()'s columns; dict of outputs."""
    n = len(p["frame"])
    nflows = int(p["flow_id"].max()) + 1 if n else 0
    out = {"ws_flags": np.zeros(n, np.int64)}
    for name in ("bif", "acks_frame", "ack_rtt", "dupack_num", "dupack_frame", "rto", "rto_frame",
                 "rel_seq", "rel_ack"):
        out[name] = np.full(n, -1, np.int64)
    ws.analyze(use_jit(n * 64), p["frame"], p["ts_ns"], p["flow_id"], p["from_client"],
               p["tcp_seq"], p["tcp_ack"], p["tcp_flags"], p["payload_bytes"], p["tcp_window"],
               p["tcp_window_shift"], p["sack_n"], p["sack_l"], p["sack_r"], nflows,
               out["ws_flags"], out["bif"], out["acks_frame"], out["ack_rtt"], out["dupack_num"],
               out["dupack_frame"], out["rto"], out["rto_frame"], out["rel_seq"], out["rel_ack"])
    return out


def tcp_analysis_table(capture_id, p, w):
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
    return numpy_table(TCP_ANALYSIS, values)


def build(con, capture_id):
    """Arrow table of `tcp_analysis` for one capture."""
    p = read_tcp(con, capture_id)
    return tcp_analysis_table(capture_id, p, wireshark_analysis(p))
