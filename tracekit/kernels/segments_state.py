"""The state of tracekit's segment pass (segments.py): its columns, pools and
output rows, and the helpers that keep the per-direction bookkeeping
(a flow slot's reset, flights and request/response exchanges written as
rows, late verdicts, the per-packet counters every packet updates).

Helpers of the `classify` kernel: plain functions over arrays that numba
inlines into it (tracekit/core/jit.py); no I/O.
"""

from .wireshark import release

NONE, NEW, REPEAT, HOLE_FILL, REORDERED, DUPLICATE, KEEP_ALIVE = 0, 1, 2, 3, 4, 5, 6
SEG_CLASS = ("", "new", "repeat", "hole_fill", "reordered", "duplicate", "keep_alive")
T_NONE, T_FAST, T_RTO, T_TLP, T_RACK, T_OTHER = 0, 1, 2, 3, 4, 5
TRIGGER = ("", "fast", "rto", "tlp", "rack", "other")
LATE_SPURIOUS, LATE_RECOVERED = 0, 1
NO_TIME = -(2 ** 63)  # "no value" where any int64 is a time
DSACK_MEMORY = 256  # retransmissions per direction a D-SACK is matched against

TH_FIN, TH_SYN, TH_RST, TH_ACK = 0x01, 0x02, 0x04, 0x10
WS_WINDOW_FULL = 128

# per-direction state (int64 columns)
(SND_MAX, SND_UNA, STARTED, LAST_SEND, LAST_ADVANCE, DUPACKS, LAST_ACK, SACKED, HIGH_SACK,
 SRTT, RTTVAR, HOLES, SENT_HEAD, SENT_TAIL, TS_HEAD, TS_TAIL, RETX_HEAD, MSS, LAST_TSVAL,
 FLIGHT, FLIGHT_MARK, FLIGHT_DONE, RETX_N, RQ_HEAD, RQ_TAIL, LAST_ACK_TS, FULL_SENT, FULL_SEEN, FL_START, FL_END,
 FL_SEGS, FL_BYTES, FL_PEAK, FL_RETX, FL_WIN, FL_PREV, ADV_WIN, FLOW_ID,
 EX_NUM, EX_LAST_CLIENT, EX_REQ_FIRST, EX_REQ_LAST, EX_RESP_FIRST, EX_RESP_LAST, EX_END,
 EX_UP_LO, EX_UP_HI, EX_DOWN_LO, EX_DOWN_HI, EX_PK_UP, EX_PK_DOWN,
 DELIVERED, DELIVERED_TS, MIN_RTT, FL_RATE, FL_QUEUED, FIRST_TX) = range(57)
NSTATE = 57
# exchange rows (requests.sql reads them): a request/response exchange of a
# connection, kept in the flow's client-direction row of `st`
EXCHANGE_OUT = ("flow", "exchange", "request_first", "request_last", "response_first",
                "response_last", "end", "bytes_up", "bytes_down", "packets_up", "packets_down")
LISTS = (HOLES, SENT_HEAD, SENT_TAIL, TS_HEAD, TS_TAIL, RETX_HEAD, RQ_HEAD, RQ_TAIL)
# flight rows (flights.sql reads them): one per flight, written when it ends
FLIGHT_OUT = ("flow", "from_client", "flight", "start", "end", "duration", "segments", "bytes",
              "peak_inflight", "prev_bytes", "retransmissions", "peer_window", "delivery_rate",
              "queued")
QUEUE_RTT = 1.25  # an RTT sample this far above the direction's smallest: a queue
# pools: holes, sent (unacknowledged new segments), tsvals, retx (for D-SACK),
# rq (retransmissions waiting for the ACK of their recovery point)
POOLS = ("hole", "sent", "tsval", "retx", "rq")
HOLE_FIELDS = ("lo", "hi", "tsval", "ts")
SENT_FIELDS = ("lo", "end", "ts", "len", "retx_row", "retx_tsval", "retx_frame", "dlv",
               "dlv_ts", "first_tx")
TSVAL_FIELDS = ("val", "ts")
RETX_FIELDS = ("lo", "hi", "row", "frame")
RQ_FIELDS = ("point", "row", "frame", "after")


def _clear_list(head, meta, link):
    u = head
    while u != -1:
        nxt = link[u]
        release(meta, link, u)
        u = nxt


def _reset(st, d, holes_m, h_next, sent_m, s_next, ts_m, t_next, retx_m, r_next, rq_m, q_next):
    _clear_list(st[d, HOLES], holes_m, h_next)
    _clear_list(st[d, SENT_HEAD], sent_m, s_next)
    _clear_list(st[d, TS_HEAD], ts_m, t_next)
    _clear_list(st[d, RETX_HEAD], retx_m, r_next)
    _clear_list(st[d, RQ_HEAD], rq_m, q_next)
    for c in range(NSTATE):
        st[d, c] = 0
    st[d, SRTT] = -1
    st[d, HOLES] = -1
    st[d, SENT_HEAD] = -1
    st[d, SENT_TAIL] = -1
    st[d, TS_HEAD] = -1
    st[d, TS_TAIL] = -1
    st[d, RETX_HEAD] = -1
    st[d, LAST_TSVAL] = -1
    st[d, RQ_HEAD] = -1
    st[d, RQ_TAIL] = -1
    st[d, LAST_ACK_TS] = -1
    st[d, ADV_WIN] = -1


def _emit_flight(st, d, duration, fo, fo_m):
    """Write direction d's open flight as a row of `fo`."""
    if st[d, FLIGHT] == 0:
        return
    k = fo_m[0]
    fo[k, 0] = st[d, FLOW_ID]
    fo[k, 1] = 1 if d % 2 == 0 else 0
    fo[k, 2] = st[d, FLIGHT]
    fo[k, 3] = st[d, FL_START]
    fo[k, 4] = st[d, FL_END]
    fo[k, 5] = duration
    fo[k, 6] = st[d, FL_SEGS]
    fo[k, 7] = st[d, FL_BYTES]
    fo[k, 8] = st[d, FL_PEAK]
    fo[k, 9] = st[d, FL_PREV]
    fo[k, 10] = st[d, FL_RETX]
    fo[k, 11] = st[d, FL_WIN]
    fo[k, 12] = st[d, FL_RATE]
    fo[k, 13] = st[d, FL_QUEUED]
    fo_m[0] = k + 1


def _emit_exchange(st, c, xo, xo_m):
    """Write the open exchange of the flow whose client row is c as a row of `xo`."""
    if st[c, EX_NUM] == 0:
        return
    k = xo_m[0]
    xo[k, 0] = st[c, FLOW_ID]
    xo[k, 1] = st[c, EX_NUM]
    xo[k, 2] = st[c, EX_REQ_FIRST]
    xo[k, 3] = st[c, EX_REQ_LAST]
    xo[k, 4] = st[c, EX_RESP_FIRST]
    xo[k, 5] = st[c, EX_RESP_LAST]
    xo[k, 6] = st[c, EX_END]
    xo[k, 7] = st[c, EX_UP_HI] - st[c, EX_UP_LO]
    xo[k, 8] = st[c, EX_DOWN_HI] - st[c, EX_DOWN_LO] if st[c, EX_PK_DOWN] > 0 else 0
    xo[k, 9] = st[c, EX_PK_UP]
    xo[k, 10] = st[c, EX_PK_DOWN]
    xo_m[0] = k + 1


def _exchange(st, c, from_client, now, s, end, ln):
    """A packet with payload: it opens an exchange when it is client data after
    server data (or the flow's first data), else it belongs to the open one."""
    if from_client and st[c, EX_LAST_CLIENT] != 1:
        st[c, EX_NUM] += 1
        st[c, EX_REQ_FIRST] = now
        st[c, EX_RESP_FIRST] = NO_TIME
        st[c, EX_RESP_LAST] = NO_TIME
        st[c, EX_UP_LO] = s
        st[c, EX_UP_HI] = end
        st[c, EX_DOWN_LO] = 0
        st[c, EX_DOWN_HI] = 0
        st[c, EX_PK_UP] = 0
        st[c, EX_PK_DOWN] = 0
        st[c, EX_END] = now
    st[c, EX_LAST_CLIENT] = 1 if from_client else 0
    if st[c, EX_NUM] == 0:  # server data before any request: not an exchange
        return
    if now > st[c, EX_END]:
        st[c, EX_END] = now
    if from_client:
        st[c, EX_REQ_LAST] = now
        st[c, EX_PK_UP] += 1
        st[c, EX_UP_LO] = min(st[c, EX_UP_LO], s)
        st[c, EX_UP_HI] = max(st[c, EX_UP_HI], end)
    else:
        if st[c, EX_RESP_FIRST] == NO_TIME:
            st[c, EX_RESP_FIRST] = now
            st[c, EX_DOWN_LO] = s
            st[c, EX_DOWN_HI] = end
        st[c, EX_RESP_LAST] = now
        st[c, EX_PK_DOWN] += 1
        st[c, EX_DOWN_LO] = min(st[c, EX_DOWN_LO], s)
        st[c, EX_DOWN_HI] = max(st[c, EX_DOWN_HI], end)


def _late(late, meta, frame, kind, value):
    k = meta[0]
    late[k, 0] = frame
    late[k, 1] = kind
    late[k, 2] = value
    meta[0] = k + 1



def _reset_flow(st, fl, flow_id, holes_m, h_next, sent_m, s_next, ts_m, t_next, retx_m, r_next,
                rq_m, q_next):
    """A flow's first packet: both directions of its slot start afresh."""
    for d in (2 * fl, 2 * fl + 1):
        _reset(st, d, holes_m, h_next, sent_m, s_next, ts_m, t_next, retx_m, r_next, rq_m,
               q_next)
        st[d, FLOW_ID] = flow_id


def _count(i, fl, fw, rv, f, now, s, ln, from_client, window_bytes, ws_flags, st, xo, xo_m,
           ack_gap, window_full_segs):
    """What every packet updates, copies included: the sender's start and MSS,
    the request/response exchanges, the window it advertises, ACK timing."""
    if st[fw, STARTED] == 0:
        st[fw, STARTED] = 1
        st[fw, SND_MAX] = s
        st[fw, SND_UNA] = s
        st[fw, LAST_ADVANCE] = now
    if ln > st[fw, MSS]:
        st[fw, MSS] = ln
    if ln > 0:  # request/response exchanges (every copy of the data counts)
        c = 2 * fl
        if from_client[i] and st[c, EX_LAST_CLIENT] != 1 and st[c, EX_NUM] > 0:
            _emit_exchange(st, c, xo, xo_m)
        _exchange(st, c, from_client[i], now, s, s + ln, ln)
    if ws_flags[i] & WS_WINDOW_FULL:
        st[fw, FULL_SENT] += 1
    if (f & (TH_SYN | TH_ACK)) == TH_ACK and window_bytes[i] >= 0:
        st[fw, ADV_WIN] = window_bytes[i]  # bounds the other direction's flights
    if f & TH_ACK and not f & TH_SYN:  # ACK timing (ack_gaps)
        if st[fw, LAST_ACK_TS] >= 0:
            ack_gap[i] = now - st[fw, LAST_ACK_TS]
        st[fw, LAST_ACK_TS] = now
        window_full_segs[i] = st[rv, FULL_SENT] - st[fw, FULL_SEEN]
        st[fw, FULL_SEEN] = st[rv, FULL_SENT]


def _inflight(i, fw, rv, st, inflight, peer_inflight):
    """Bytes in flight (SACK-aware) of the packet's sender and of its peer."""
    inflight[i] = max(0, st[fw, SND_MAX] - st[fw, SND_UNA] - st[fw, SACKED])
    if st[rv, STARTED]:
        peer_inflight[i] = max(0, st[rv, SND_MAX] - st[rv, SND_UNA] - st[rv, SACKED])
