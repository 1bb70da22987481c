"""Calibration: the path, the sender and the server of one group of requests,
from what the store holds of them (requests, flows, packets, the TCP
analysis, retransmissions, event logs and labels).

Every value says where it came from (`Calibration.sources`): a label the
user gave (`rtt_ms`, `bottleneck_mbps`/`rate_mbps`, `queue_bytes`,
`congestion`, `initcwnd`, `pacing`) is a statement about the path and wins;
otherwise the trace:

- base RTT: the smallest handshake RTT of the group's flows (Karn: not where
  the SYN or SYN-ACK was sent twice); without a
  handshake, the smallest request round trip (last request byte -> first
  response byte) less the server's time;
- bottleneck rate: trains of full-sized response segments at one spacing,
  unless the flows' own arrivals in a round trip show the path carried
  more (then the trains are the sender's pacing: unknown, at least that);
  fewer than `MIN_TRAINS` trains: unknown (whatif/pathrate.py);
- jitter: the handshake RTTs' interquartile range / (1 - 1/sqrt(2)), the
  replay's model of the spread (whatif/pathrate.py); a label wins;
- loss (downstream): retransmissions of response segments that were not
  spurious over the segments (a client sees one retransmission per segment
  whose first copy was lost; retransmissions lost again never reach it),
  less those lost in runs of 3 or more in a row (the queue overflowing: the
  replay's own queue drops them; at random loss p a run of 3 has p^3) and
  those lost at a full queue (whatif/queueing.py), and then over the
  segments that did not arrive at a full queue (a random loss there looks
  alike);
  burstiness: P(lost | the segment before was lost) among them (0 unless
  more than twice the loss rate; at most 0.5);
- queue: a label, else the longest train (bytes; the queue plus what came in
  while it drained: a guess, said so in --explain) or the longest wait the
  flows' segments had in it (whatif/queueing.py: a queue that held that
  wait is at least that deep) times the rate, whichever is more, at least
  one bandwidth-delay product x 0.4 (the lab's default of 256 kB on its
  50 Mbit/s x 100 ms path);
- a token bucket's burst (bytes beyond a packet; tbf): at a client capture,
  per response the most of any of its flights (after a silence) that
  arrived back to back, faster than the rate serialises it; the upper
  quartile over the responses (whatif/pathrate.py); else 0, a FIFO;
- congestion control: the server's `tcp_info` events (ssthresh never set
  after retransmissions in a quarter or more of the connections: a
  rate-based sender, BBR, since CUBIC and Reno set it at every recovery;
  else CUBIC), else the
  pacing of the second flight of fresh connections (spread over more than
  a third of the round trip: BBR), else CUBIC;
- initial window: the first flight of fresh connections (segments before
  the first gap longer than RTT / 4);
- server time: the model's time from server events (`model_start` ->
  `model_end`) where there are some, else the request round trip less the
  RTT; the rest of the request round trip is `server_s` (the server's own
  overhead, kept as it is under any change).
"""

from dataclasses import dataclass, field

import numpy as np

from . import losses, pathrate, queueing
from .factors import describe
from .group import common_labels as _common_labels
from .group import handshakes, load_requests, path_handshakes
from .pathrate import MIN_TRAINS, WIRE_HEADER, label_float

QUEUE_GUESS = ("longest train at the bottleneck's spacing or longest wait in it seen x the rate, "
               "at least 0.4 BDP (a guess: label it)")


@dataclass
class Request:
    key: str
    run: str
    index: int              # position among its run's requests (start order)
    duration_s: float
    bytes_down: int
    fresh: bool
    prior: int              # responses sent on its connection before it


@dataclass
class Calibration:
    requests: list
    rtt_s: float
    rate_Bps: float
    loss_down: float
    burst: float
    loss_up: float
    queue_bytes: float
    congestion: str
    initcwnd: int
    pacing: bool
    mss: int
    processing_s: float
    server_s: float
    connect_s: float        # fresh: request sent this long after the handshake's RTT
    reuse_s: float          # persistent: request sent this long after its start
    jitter_s: float = 0.0
    rcv_window: tuple | None = None  # (first, clamp) segments the client offers; None: unknown
    rcv_model: bool = False  # replay the client's receive window (rcv_window=client: the default)
    sources: dict = field(default_factory=dict)  # factor name (rtt_ms, ...) -> where from
    estimates: dict = field(default_factory=dict)
    # where the group's requests were captured: at a server a request runs from
    # its first packet's arrival to its last byte's departure, a round trip
    # less than the client's (half at each end) and the last segment's queue
    # wait; the replay ends such a request at its last send (replayer._replay_direct)
    vantage: str = "client"
    hystart: bool = True    # CUBIC's HyStart; off where the group's slow starts say so
    bucket_bytes: float = 0.0  # a token bucket's burst beyond a packet (pathrate.bucket); 0 a FIFO
    bad_loss: float = 1.0   # share a burst's bad state loses (whatif/chain.py); 1: Gilbert's
    head_bytes: int = 0     # a response's header sent apart as its first packet (_head); 0 none


def calibrate(con, where, stated=None):
    """The Calibration of the requests matching `where` ({label: value});
    `stated` ({factor: value}, --assume) is read as the runs' labels are: a
    rate the trace cannot give is not asked of it."""
    from ..core.errors import TracekitError
    df = load_requests(con, where)
    if df.empty:
        raise TracekitError(f"no requests match {describe(where)}: nothing to calibrate")
    common = _common_labels(df)
    labels = {**common, **{k: str(v) for k, v in (stated or {}).items()}}
    src, est = {}, {}
    if df.attrs.get("cut"):
        src["requests"] = (f"{len(df.attrs['cut'])} more left out, cut by the "
                           f"capture's end ({', '.join(df.attrs['cut'][:3])}"
                           f"{', ...' if len(df.attrs['cut']) > 3 else ''})")
    flows = losses.flows_of(df)
    mss, gaps = _segments(con, flows)
    proc = _processing(con, df)
    hs = handshakes(df)
    rtt = _rtt(df, hs, proc, labels, src, est)
    path, whence = (hs, None) if "jitter_ms" in labels else path_handshakes(
        con, df, common, pathrate.MIN_HANDSHAKES)
    jitter = pathrate.jitter(path.to_numpy(dtype=float) / 1e9, labels, src, est, whence)
    spread = max(est.get("rtt_range_ms", 0.0) / 1e3, jitter)
    rate = pathrate.rate(gaps, mss, rtt, spread, labels, src, est)
    loss, burst, bad_loss, reading, waits = loss_of(con, df, rate, src, est)
    ttfb = (df.response_first_byte_ns - df.request_last_byte_ns).to_numpy() / 1e9
    vantage = "server" if (df.vantage == "server").all() else "client"
    seen = 0.0 if vantage == "server" else rtt  # a server sees the request arrive: no trip
    if proc is None:
        proc = max(float(np.median(ttfb)) - seen, 0.0)
        src["processing_ms"] = ("request to response at the server" if vantage == "server"
                                else "request round trip less the RTT")
    else:
        src["processing_ms"] = "server events (model_start -> model_end)"
    fresh = (df.connection == "fresh").to_numpy()
    sent = (df.request_last_byte_ns - df.start_ns).to_numpy() / 1e9
    cal = Calibration(
        requests=_requests(con, df), rtt_s=rtt, rate_Bps=rate, loss_down=loss, burst=burst,
        bad_loss=bad_loss,
        loss_up=label_float(labels, "loss_up", 0.0), queue_bytes=0.0,
        congestion=_congestion(con, df, gaps, rtt, rate, mss, labels, src),
        initcwnd=_initcwnd(con, flows, mss, rtt, labels, src, est), pacing=labels.get("pacing") == "fq",
        mss=mss, processing_s=proc,
        server_s=max(float(np.median(ttfb)) - seen - proc, 0.0),
        connect_s=max(float(np.median(sent[fresh] - rtt)), 0.0) if fresh.any() else 0.001,
        reuse_s=float(np.median(sent[~fresh])) if (~fresh).any() else 0.0001,
        jitter_s=jitter, sources=src, estimates=est, vantage=vantage)
    cal.queue_bytes = _queue(gaps, mss, rate, rtt, labels, src, est,
                             _overflow_flights(con, flows, rtt)
                             if est.get("queue_drops") and not waits else [], waits,
                             queueing.held(reading))
    cal.rcv_window = _rcv_window(con, flows, mss, cal.initcwnd, src, est)
    starts = {}
    for c, f, t in zip(df.capture_id, df.flow_id, df.response_first_byte_ns):
        if f == f and t == t:
            starts.setdefault((int(c), int(f)), []).append(t / 1e9)
    cal.bucket_bytes = pathrate.bucket(gaps, starts, rate, rtt, vantage, src, est)
    cal.rcv_model = cal.rcv_window is not None  # the default since the sixth round
    cal.head_bytes = _head(con, df, mss, src, est)
    return cal


def _head(con, df, mss, src, est):
    """Bytes of the header a server sends as a packet of its own before the
    body (Python's http.server writes the header, then the file): in a
    burst into a full queue it takes a window's slot but little of the
    queue (twenty-fifth round). Read from the first response packet of each
    response of more than two segments: where most are shorter than the
    MSS, the most common of those (at most half a segment: a capture's
    TSO/GRO packets make the MSS read larger than the wire's); else 0."""
    big = df[(df.bytes_down > 2 * mss) & df.capture_id.notna() & df.flow_id.notna()
             & df.response_first_byte_ns.notna()]
    rows = con.execute("""
        SELECT t.payload_bytes
        FROM (SELECT unnest(?) AS c, unnest(?) AS f, unnest(?) AS ts) k
            JOIN tcp_analysis t ON t.capture_id = k.c AND t.flow_id = k.f AND t.ts_ns = k.ts
        WHERE NOT t.from_client AND t.payload_bytes > 0
        QUALIFY row_number() OVER (PARTITION BY k.c, k.f, k.ts ORDER BY t.frame) = 1""",
        [big.capture_id.astype("int64").tolist(), big.flow_id.astype("int64").tolist(),
         big.response_first_byte_ns.astype("int64").tolist()]).fetchall()
    first = [r[0] for r in rows]
    short = [p for p in first if p <= mss // 2]
    if not first or 2 * len(short) <= len(first):
        src["head_bytes"] = (f"0: the body's segments from the first packet ({len(first)} "
                             "responses of more than two segments)")
        return 0
    vals, counts = np.unique(short, return_counts=True)
    head = int(vals[np.argmax(counts)])
    est["head_bytes"] = head
    src["head_bytes"] = (f"{len(short)} of {len(first)} responses' first packet shorter than "
                         f"the MSS, most often {head} bytes: the header sent apart")
    return head


def _rcv_window(con, flows, mss, initcwnd, src, est):
    """(first, clamp): the window (segments) the client offers in its
    handshake ACK, and the largest it offers while it acknowledges the first
    flight (its receive buffer's window before autotuning raises it), the
    medians over the flows; None where the client's ACKs carry no window."""
    firsts, clamps = [], []
    for cap, fl in flows:
        r = con.execute("""SELECT t.rel_ack, p.tcp_window_bytes FROM tcp_analysis t
            JOIN packets p USING (capture_id, frame)
            WHERE t.capture_id = ? AND t.flow_id = ? AND t.from_client AND t.payload_bytes = 0
              AND t.rel_ack IS NOT NULL AND p.tcp_window_bytes IS NOT NULL
            ORDER BY t.ts_ns""", [cap, fl]).fetchall()
        flight = [w for a, w in r if 1 < a <= initcwnd * mss + 1]
        if r and flight:
            firsts.append(r[0][1] / mss)
            clamps.append(max(flight) / mss)
    if not firsts:
        src["rcv_window"] = "unknown (no window in the client's ACKs): not limited"
        return None
    first, clamp = float(np.median(firsts)), float(np.median(clamps))
    est.update(rcv_window_first=first, rcv_window_clamp=clamp)
    src["rcv_window"] = (f"the client's ACKs in {len(firsts)} flows: {first:.1f} segments at the "
                         f"handshake, {clamp:.1f} over the first flight")
    return first, max(first, clamp)


def _segments(con, flows):
    """(MSS, {flow: arrays of (ts_s, payload) of response data in order})."""
    out = {}
    sizes = []
    for cap, fl in flows:
        rows = con.execute("""SELECT ts_ns, payload_bytes FROM tcp_analysis
            WHERE capture_id = ? AND flow_id = ? AND NOT from_client AND payload_bytes > 0
            ORDER BY ts_ns""", [cap, fl]).fetchnumpy()
        out[(cap, fl)] = (rows["ts_ns"].astype(np.int64) / 1e9, rows["payload_bytes"])
        sizes.append(rows["payload_bytes"])
    allsz = np.concatenate(sizes) if sizes else np.array([1448])
    vals, counts = np.unique(allsz, return_counts=True)
    mss = int(vals[np.argmax(counts)]) if len(vals) else 1448
    return mss, out


def _rtt(df, hs, proc, labels, src, est):
    """The base RTT (s): the smallest of the flows' handshake RTTs `hs` (ns)."""
    if len(hs):
        est["rtt_ms"] = float(hs.min()) / 1e6
        src["rtt_ms"] = f"smallest handshake RTT of {len(hs)} flows"
        return est["rtt_ms"] / 1e3
    ttfb = (df.response_first_byte_ns - df.request_last_byte_ns) / 1e9
    if "rtt_ms" in labels:
        src["rtt_ms"] = "label rtt_ms (no handshake in the trace)"
        return label_float(labels, "rtt_ms", 0.0) / 1e3
    est["rtt_ms"] = (float(ttfb.min()) - (proc or 0.0)) * 1e3
    src["rtt_ms"] = "smallest request round trip less the server's time"
    return est["rtt_ms"] / 1e3


def _processing(con, df):
    keys = list(zip(df.run, df.request))
    rows = con.execute("""
        SELECT run, request, max(ts_ns) FILTER (WHERE kind = 'model_end')
                           - min(ts_ns) FILTER (WHERE kind = 'model_start')
        FROM events WHERE kind IN ('model_start', 'model_end') AND run IN (SELECT unnest(?))
        GROUP BY run, request""", [sorted({k[0] for k in keys})]).fetchall()
    d = [v for r, q, v in rows if (r, q) in set(keys) and v is not None and v >= 0]
    return float(np.median(d)) / 1e9 if d else None


def loss_of(con, df, rate, src, est):
    """(random loss, burstiness, the share a burst loses, the queue's reading,
    the waits of the flows that lost at a full queue) of the requests in df:
    whatif/queueing.py says which losses were the queue's, whatif/losses.py
    reads the rest."""
    seen = {(int(c), int(f)): v for c, f, v in zip(df.capture_id, df.flow_id, df.vantage)
            if f == f}
    reading = queueing.read(con, seen, rate)
    full, waits = queueing.overflowed(reading)
    loss, burst, bad_loss = losses.read(con, losses.flows_of(df), src, est, full,
                                        {k: v[3] for k, v in reading.items()} if full else {},
                                        reading.keys())
    return loss, burst, bad_loss, reading, waits


def _overflow_flights(con, flows, rtt):
    """Segments (count) of each flight that reached the client before a run
    of `losses.QUEUE_RUN` or more lost in a row: what the queue took before it
    overflowed (plus the little it drained while a line-rate burst came in)."""
    out = []
    for cap, fl in flows:
        step = losses.segment_step(con, cap, fl)
        runs = losses.in_runs(queueing.lost_segments(con, cap, fl), step)
        if not runs:
            continue
        r = con.execute("""SELECT min(ts_ns), rel_seq FROM tcp_analysis WHERE capture_id = ?
            AND flow_id = ? AND NOT from_client AND payload_bytes > 0 GROUP BY rel_seq
            ORDER BY 1""", [cap, fl]).fetchall()
        ts = np.array([t for t, _ in r], dtype=np.int64) / 1e9
        where = {q: i for i, (_, q) in enumerate(r)}
        for s0 in sorted(x for x in runs if x - step not in runs):
            i = where.get(s0 - step)
            if i is None:
                continue
            j = i
            while j > 0 and ts[j] - ts[j - 1] < rtt / 4:
                j -= 1
            out.append(i - j + 1)
    return out


def _queue(gaps, mss, rate, rtt, labels, src, est, overflows=(), waits=(), held=0.0):
    longest = max((n for _, n in pathrate.trains(gaps, mss)), default=0) * (mss + WIRE_HEADER)
    if held:  # the queue held this long a wait without a drop: it is at least this deep
        est["queue_held_ms"] = held * 1e3
    # the guess's basis, not a bound: a train under ACK clocking outlasts the queue
    # (a 50 Mbit/s tbf whose limit is 202 kB: a 1.36 MB train, docs/whatif.md)
    est["queue_basis_bytes"] = max(longest, held * rate)
    if "queue_bytes" in labels:
        src["queue_bytes"] = "label queue_bytes"
        return label_float(labels, "queue_bytes", 0.0)
    if waits:
        est["queue_wait_ms"] = float(np.median(waits)) * 1e3
        src["queue_bytes"] = (f"the longest wait at the bottleneck ({est['queue_wait_ms']:.1f} ms, "
                              f"median of {len(waits)} flows that lost segments at a full queue: "
                              "whatif/queueing.py) x the rate")
        return float(np.median(waits)) * rate
    est["queue_overflow_flights"] = len(overflows)
    if len(overflows) >= MIN_TRAINS:  # one run of 3 can be random loss's
        src["queue_bytes"] = (f"the smallest of {len(overflows)} flights that reached the client before "
                        "the queue overflowed (a run of lost segments)")
        return float(min(overflows)) * (mss + WIRE_HEADER)
    src["queue_bytes"] = QUEUE_GUESS
    return queue_guess(est["queue_basis_bytes"], rate, rtt)


def queue_guess(basis, rate, rtt):
    """QUEUE_GUESS (bytes): the longest train or the longest wait x the rate
    (`basis`, whichever is more; only the wait is a bound), at least 0.4 BDP."""
    return max(float(basis), 0.4 * rate * rtt)


def _congestion(con, df, gaps, rtt, rate, mss, labels, src):
    if labels.get("congestion"):
        src["congestion"] = "label congestion"
        return labels["congestion"]
    runs = sorted(set(df.run))
    named = con.execute("""SELECT json_extract_string(fields, '$.congestion') AS ca, count(*)
        FROM events WHERE kind = 'tcp_info' AND run IN (SELECT unnest(?)) AND ca IS NOT NULL
        GROUP BY ca ORDER BY 2 DESC""", [runs]).fetchall()
    if named:  # the kernel's own word (getsockopt TCP_CONGESTION, the lab's server logs it)
        src["congestion"] = f"server tcp_info: the kernel's algorithm, {named[0][1]} connections"
        return named[0][0]
    rows = con.execute("""SELECT json_extract(fields, '$.tcpi_snd_ssthresh')::BIGINT,
                                 json_extract(fields, '$.tcpi_total_retrans')::BIGINT
        FROM events WHERE kind = 'tcp_info' AND run IN (SELECT unnest(?))""", [runs]).fetchall()
    retrans = [(s, t) for s, t in rows if s is not None and t]
    if retrans:
        unset = sum(1 for s, _ in retrans if s >= 2 ** 31 - 1)
        src["congestion"] = (f"server tcp_info: ssthresh never set in {unset} of "
                             f"{len(retrans)} connections with retransmissions")
        # a loss-based sender sets ssthresh at every recovery: a quarter or more
        # of the connections without it is a rate-based one (BBR)
        return "bbr" if unset >= len(retrans) / 4 else "cubic"
    spread, serial = [], []
    for ts, size in gaps.values():
        if len(ts) > 30:
            second = ts[(ts > ts[0] + rtt / 2) & (ts < ts[0] + 1.5 * rtt)][:20]
            if len(second) >= 10:
                spread.append((second[-1] - second[0]) / rtt)
                # what the bottleneck's own spacing makes of a line-rate burst
                serial.append((len(second) - 1) * (mss + WIRE_HEADER) / rate / rtt)
    if spread:
        # paced: spread over a third of the round trip and half again what
        # the bottleneck alone spreads a burst over (on a slow path a burst
        # arrives as spread as pacing would make it)
        paced = float(np.median(spread)) > max(1 / 3, 1.5 * float(np.median(serial)))
        src["congestion"] = (f"second flight spread over {np.median(spread):.2f} RTT, the "
                             f"bottleneck's spacing {np.median(serial):.2f}: "
                             f"{'paced (BBR)' if paced else 'a burst (CUBIC)'}")
        if not paced:  # CUBIC or Reno: the replay tells them apart (engine._congestion_reading)
            src["congestion_read"] = "burst"
        return "bbr" if paced else "cubic"
    src["congestion"] = "no evidence: CUBIC, Linux's default"
    return "cubic"


def _initcwnd(con, flows, mss, rtt, labels, src, est):
    """The first flight: the segments that arrive before the first silence of
    a quarter RTT, counted by the sequence space they span (a segment of the
    flight lost on the way is still part of it)."""
    firsts = []
    for cap, fl in flows:
        r = con.execute("""SELECT ts_ns, rel_seq, rel_end FROM tcp_analysis
            WHERE capture_id = ? AND flow_id = ? AND NOT from_client AND payload_bytes > 0
            ORDER BY ts_ns""", [cap, fl]).fetchnumpy()
        if len(r["ts_ns"]) > 12:
            big = np.nonzero(np.diff(r["ts_ns"] / 1e9) > rtt / 4)[0]
            if len(big):
                k = int(big[0]) + 1
                span = r["rel_end"][:k].max() - r["rel_seq"][:k].min()
                firsts.append(max(k, int(round(span / mss))))
    if firsts:
        est["initcwnd"] = int(np.median(firsts))
    if "initcwnd" in labels:
        src["initcwnd"] = "label initcwnd"
        return int(label_float(labels, "initcwnd", 10))
    if firsts:
        src["initcwnd"] = f"first flight of {len(firsts)} connections"
        return est["initcwnd"]
    src["initcwnd"] = "Linux's default"
    return 10


def _requests(con, df):
    """Request rows with their index in the run and the responses before them on their flow."""
    out = []
    for run, g in df.groupby("run", sort=False):
        g = g.sort_values("start_ns")
        seen = {}
        for i, r in enumerate(g.itertuples()):
            flow = (r.capture_id, r.flow_id)
            prior = seen.get(flow, 0)
            seen[flow] = prior + 1
            fresh = r.connection == "fresh"
            out.append(Request(r.request_key, run, i, r.duration_ns / 1e9, int(r.bytes_down),
                               fresh, prior))
    warm = _warmups(con, df)
    for q in out:
        if not q.fresh:
            q.prior += warm.get(q.run, 0)
    return out


def measured_connection(requests, instead):
    """('fresh' or 'persistent', the warm-up responses) of a group's runs. Runs
    whose first request opens their one connection and whose others follow on
    it (made by hand: curl with keep-alive, a client's session) are
    persistent with no warm-up, as the lab's `warmup = 0`; fresh runs beside
    persistent ones are refused (`instead`: what to do, for the message)."""
    fresh = {q.fresh for q in requests}
    if fresh == {True}:
        return "fresh", 0
    if fresh == {False}:
        return "persistent", min(q.prior for q in requests)
    if all(q.fresh == (q.index == 0) for q in requests):
        return "persistent", 0
    from ..core.errors import TracekitError
    raise TracekitError(f"the group mixes fresh and persistent connections: {instead} "
                        "(--by connection, or --where connection=...)")


def first_warmups(con, df):
    """Per run of `df` (load_requests), the responses its connection carried
    before its first request: 0 where that request opened the connection, at
    least 1 where it did not (a capture begun on an open connection)."""
    return [0 if q.fresh else max(q.prior, 1) for q in _requests(con, df) if q.index == 0]


def _warmups(con, df):
    """Responses the server sent on a run's connection before its first measured request."""
    rows = con.execute("""SELECT run, count(*) FROM events WHERE kind = 'response_sent'
        AND run IN (SELECT unnest(?)) AND request LIKE 'warmup%' GROUP BY run""",
                       [sorted(set(df.run))]).fetchall()
    return {r: int(n) for r, n in rows}
