"""`request_phases`: what the transport did during each phase of each request.

A request (requests.sql) is cut at four instants seen on its flow at the
capture point: its first and last request byte (a, b) and first and last
response byte (c, d), clamped into order inside [start, end]. This table
gives, per request, those instants and how long each limitation state of
`stalls` held during the upload [a, b] (the client's data) and the download
[c, d] (the server's), the recovery round each stretch of download loss
recovery belongs to, and, seen from the client (or for QUIC, whose ACKs are
encrypted), the gaps between the server's data packets by what explains
them (see download_gaps).

Strategy: these are overlaps of intervals (a request's phase) with other
intervals (runs of a state) or points (packets) on the same flow. As SQL
that is a join of every request of a flow with every run of it -- requests x
runs pairs, 1.6e11 on a capture with tens of thousands of requests per
connection. Here both sides are sorted by (flow, start) and swept once with
a pointer that only moves forward (the runs of a flow direction tile its
life without overlapping), so the cost is the size of the inputs plus the
overlaps actually found.
"""

import contextlib
import tempfile

import numpy as np
import pyarrow as pa

from ...core.jit import PYTHON_COST, kernel, use_jit
from ...store.arrow import numpy_array
from ...store.schema import create_table_sql
from ...store.writer import AppendWriter
from . import phases_sql
from .phases_sql import PACKET_COLUMNS, PACKETS_SQL, PARTS_SQL, _fetch, flow_parts  # noqa: F401
from .stalls import STATES

TABLES = ("request_phases",)
READS = ("bounds", "flows", "packets", "recovery_rounds", "requests", "stalls")
SCOPE = "store"  # built over the whole store (tracekit.pipeline.dag)
SOURCES = (phases_sql,)  # code whose change rebuilds the table

NO_CLIENT = -9223372036854775807  # no packet of the client's yet


@kernel
def pause_inputs(key, client, ts, size, has_mss, full, out_has_prev, out_prev, out_prev_bytes,
                 out_last_client):
    """For the server's data packets: whether one came before on the flow, its
    time and size, the client's last packet before (NO_CLIENT: none), and the size a
    full segment has (within 40 option bytes of the MSS the client announced,
    else the largest the server sent: `full` is set where `has_mss` is not).
    Packets sorted by (key, frame); the client's packets are all of them, the
    server's those with data."""
    n = len(key)
    i = 0
    while i < n:
        end = i
        largest = 0
        while end < n and key[end] == key[i]:
            if not client[end]:
                largest = max(largest, size[end])
            end += 1
        prev = -1
        last_client = NO_CLIENT
        for k in range(i, end):
            if client[k]:
                last_client = max(last_client, ts[k])
                continue
            if not has_mss[k]:
                full[k] = largest
            out_last_client[k] = last_client
            if prev >= 0:
                out_has_prev[k] = True
                out_prev[k] = ts[prev]
                out_prev_bytes[k] = size[prev]
            prev = k
        i = end


def pauses(r):
    """The server's data packets of a partition that follow another (download_gaps'
    input), from its packets (PACKETS_SQL)."""
    order = _lexorder(_i64(r["frame"]), _i64(r["flow_key"]))
    key, ts = _i64(r["flow_key"])[order], _i64(r["ts_ns"])[order]
    client = np.asarray(r["from_client"], bool)[order]
    size, full = _i64(r["payload_bytes"])[order], _i64(r["full_bytes"])[order]
    has_mss = np.asarray(r["has_mss"], bool)[order]
    has_prev = np.zeros(len(key), bool)
    prev, prev_bytes, last_client = (np.zeros(len(key), np.int64) for _ in range(3))
    pause_inputs(use_jit(len(key) * PYTHON_COST), key, client, ts, size, has_mss, full, has_prev,
                 prev, prev_bytes, last_client)
    keep = ~client & has_prev
    return {"flow_key": key[keep], "ts_ns": ts[keep], "prev_ns": prev[keep],
            "prev_bytes": prev_bytes[keep], "full_bytes": full[keep],
            "last_client_ns": last_client[keep]}


@kernel
def state_overlaps(req_key, req_lo, req_hi, run_key, run_lo, run_hi, run_state, out):
    """out[i, s] += how long runs of state s overlap [req_lo[i], req_hi[i]] on the
    same key. Requests sorted by (key, lo); runs by (key, lo), not overlapping
    within a key (hence also sorted by hi)."""
    m = len(run_key)
    j0 = 0
    for i in range(len(req_key)):
        key = req_key[i]
        lo = req_lo[i]
        hi = req_hi[i]
        while j0 < m and (run_key[j0] < key or (run_key[j0] == key and run_hi[j0] <= lo)):
            j0 += 1
        j = j0
        while j < m and run_key[j] == key and run_lo[j] < hi:
            ov = min(run_hi[j], hi) - max(run_lo[j], lo)
            if ov > 0:
                out[i, run_state[j]] += ov
            j += 1


@kernel
def overlap_pairs(req_key, req_lo, req_hi, run_key, run_lo, run_hi, out_req, out_run, out_ns):
    """Every (request, run, overlap) with overlap > 0; returns how many (when
    the outputs are too small, only counts: call again with room)."""
    m = len(run_key)
    cap = len(out_req)
    k = 0
    j0 = 0
    for i in range(len(req_key)):
        key = req_key[i]
        lo = req_lo[i]
        hi = req_hi[i]
        while j0 < m and (run_key[j0] < key or (run_key[j0] == key and run_hi[j0] <= lo)):
            j0 += 1
        j = j0
        while j < m and run_key[j] == key and run_lo[j] < hi:
            ov = min(run_hi[j], hi) - max(run_lo[j], lo)
            if ov > 0:
                if k < cap:
                    out_req[k] = i
                    out_run[k] = j
                    out_ns[k] = ov
                k += 1
            j += 1
    return k


GAP_CLASSES = ("loss", "receiver", "short", "clocked", "beyond")
GAP_LOSS, GAP_RECEIVER, GAP_SHORT, GAP_CLOCKED, GAP_BEYOND = range(5)
LOSS_STATES = (3, 4)  # rto_wait, loss_recovery (STATES)
RECEIVER_STATES = (5, 6)  # zero_window, receive_window_limited


@kernel
def download_gaps(req_key, req_c, req_d, req_rtt, pk_key, pk_ts, pk_prev, pk_prev_bytes,
                  pk_full, pk_last_client, run_key, run_lo, run_hi, run_state, out):
    """Partition each download [c, d] seen from the client into the gaps between
    the server's data packets and classify each gap by what explains it
    (out[i, class] += gap): the server's data direction was in loss recovery
    or receive-window limited when it began (its state in `stalls`); it
    followed a short segment (the sender had no full segment to send); else
    the ACK clock: a sender held by its window sends again when the client's
    ACK reaches it, so a gap after a full-sized segment is `clocked` up to
    1.25 R after the client's last packet before it ended, and `beyond`
    after that. Requests sorted by (key, c); packets by (key, prev); runs of
    the server's data by (key, lo), not overlapping within a key."""
    m = len(pk_key)
    nr = len(run_key)
    j0 = 0
    r0 = 0
    for i in range(len(req_key)):
        key = req_key[i]
        c = req_c[i]
        d = req_d[i]
        budget = req_rtt[i] + req_rtt[i] // 4
        while j0 < m and (pk_key[j0] < key or (pk_key[j0] == key and pk_prev[j0] < c)):
            j0 += 1
        while r0 < nr and (run_key[r0] < key or (run_key[r0] == key and run_hi[r0] <= c)):
            r0 += 1
        j = j0
        r = r0
        while j < m and pk_key[j] == key and pk_prev[j] <= d:
            prev = pk_prev[j]
            ts = pk_ts[j]
            if ts <= d and prev >= c and ts > prev:
                gap = ts - prev
                while r < nr and run_key[r] == key and run_hi[r] <= prev:
                    r += 1
                state = -1
                if r < nr and run_key[r] == key and run_lo[r] <= prev:
                    state = run_state[r]
                if state == LOSS_STATES[0] or state == LOSS_STATES[1]:
                    out[i, GAP_LOSS] += gap
                elif state == RECEIVER_STATES[0] or state == RECEIVER_STATES[1]:
                    out[i, GAP_RECEIVER] += gap
                elif pk_prev_bytes[j] < pk_full[j]:
                    out[i, GAP_SHORT] += gap
                else:
                    clocked = min(gap, max(0, pk_last_client[j] + budget - prev))
                    out[i, GAP_CLOCKED] += clocked
                    out[i, GAP_BEYOND] += gap - clocked
            j += 1


def _i64(a):
    return np.asarray(a, dtype=np.int64)  # (no copy when it is one already)


def _lexorder(sub, key):
    """np.lexsort((sub, key)), the same permutation, in O(n) where it can be:
    fetched rows mostly come in (key, sub) order already (then a check does),
    or in `sub`'s order (a table's rows in time or frame order: then a stable
    sort of the key alone does, a radix sort when a partition's keys span
    fewer than 2^16). 2.9 M packets: 0.19 -> 0.03 s."""
    n = len(key)
    if n < 2:
        return np.arange(n)
    step = key[1:] - key[:-1]
    rising = sub[1:] >= sub[:-1]
    if (step >= 0).all() and ((step > 0) | rising).all():
        return np.arange(n)
    if rising.all():
        low = key.min()
        if key.max() - low < 65536:
            return np.argsort((key - low).astype(np.uint16), kind="stable")
        return np.argsort(key, kind="stable")
    return np.lexsort((sub, key))


PART_RUNS = 500_000  # stall runs and data packets a partition holds at most (bounded memory)

def partitions(con):
    """(capture_id, first flow, last flow) ranges of at most PART_RUNS stall runs and
    server data packets, then (None, 0, 0) for the requests without a flow."""
    r = _fetch(con, PARTS_SQL)
    cap, flow, runs = _i64(r["capture_id"]), _i64(r["flow_id"]), _i64(r["runs"])
    with_requests = _fetch(con, "SELECT DISTINCT capture_id FROM requests "
                                "WHERE capture_id IS NOT NULL ORDER BY 1")
    parts = []
    for cid in _i64(with_requests["capture_id"]):
        sel = cap == cid
        f, n = flow[sel], runs[sel]
        lo, size = 0, 0
        for k in range(len(f)):
            if size and size + n[k] > PART_RUNS:
                parts.append((int(cid), lo, int(f[k - 1])))
                lo, size = int(f[k]), 0
            size += n[k]
        parts.append((int(cid), lo, 2 ** 62))
    parts.append((None, 0, 0))
    return parts


def build_all(con, target="request_phases"):
    """Create `request_phases` (under the name `target`) from the whole store, a
    partition at a time, each committed on its own; return its rows.

    A partition gets its rows of each input (the requests' instants, the
    stall runs, the download loss stretches, the packets the download gaps
    need) straight from the tables when there are few partitions, else from
    a scratch folder beside the store each input was written out to by
    partition once (phases_sql.py says why and what each costs). A thread
    appends the rows in whole row groups while the next partition is built
    (2.9 M packets, 11 partitions: the step alone 6.6 -> 4.5-4.8 s, within
    an analyze 4.75 -> 4.32 s; 125 MB more held)."""
    con.execute(f"DROP TABLE IF EXISTS {target}")
    con.execute(create_table_sql("request_phases").replace(
        "CREATE TABLE IF NOT EXISTS request_phases", f"CREATE TABLE {target}", 1))
    parts = partitions(con)
    rows = 0
    spilling = len(parts) > phases_sql.DIRECT_PARTS
    with (tempfile.TemporaryDirectory(prefix=".tracekit-phases-", dir=phases_sql.scratch_dir(con))
          if spilling else contextlib.nullcontext()) as tmp:
        writer = AppendWriter(con.cursor())  # appends while the next partition is built
        try:
            flow_parts(con, parts)
            if spilling:
                phases_sql.spill(con, parts, tmp)
            read = phases_sql.spilled(con, tmp) if spilling else phases_sql.direct(con, parts)
            writer.start()
            for k, part in enumerate(parts):
                table = _partition(con, part, read(k))
                if table is not None:  # (None: no request, of no flow)
                    writer.put(target, table)
                    rows += table.num_rows
            writer.finish()
        finally:
            if writer.is_alive():
                writer.abandon()
            writer.con.close()
            con.execute("DROP TABLE IF EXISTS temp._phase_parts")
            con.execute("DROP TABLE IF EXISTS temp._phase_flows")
    return rows


def _read(rows, columns):
    """A partition's rows of one input; None: each column empty."""
    return {c: np.zeros(0, np.int64) for c in columns} if rows is None else rows


def _partition(con, part, rows):
    """The `request_phases` rows of one partition as an Arrow table (None: it
    has no request); `rows(name)` gives its rows of each input."""
    r = rows("instants")
    if r is None:
        return None
    n = len(r["request_key"])
    jit = use_jit(n * PYTHON_COST)
    key = _i64(r["flow_key"])
    a, b, c, d = (_i64(r[x]) for x in "abcd")
    has_flow = r["has_flow"].astype(bool)
    nstates = len(STATES)
    up = np.zeros((n, nstates), np.int64)
    down = np.zeros((n, nstates), np.int64)
    qo = _lexorder(c, key)
    no_flow = part[0] is None
    if n and not no_flow:
        # upload and download: state totals
        runs = _read(rows("runs"), ("flow_key", "c2s", "start_ns", "end_ns", "state"))
        runs_c2s = runs["c2s"].astype(bool)
        runs_key, runs_lo = _i64(runs["flow_key"]), _i64(runs["start_ns"])
        runs_hi, runs_state = _i64(runs["end_ns"]), _i64(runs["state"])
        sorted_runs = {}  # each direction's runs in (key, start) order
        for c2s, (lo, hi, out, order) in ((True, (a, b, up, _lexorder(a, key))),
                                          (False, (c, d, down, qo))):
            sel = runs_c2s == c2s
            rk, rlo, rhi = runs_key[sel], runs_lo[sel], runs_hi[sel]
            rs = runs_state[sel]
            ro = _lexorder(rlo, rk)
            sorted_runs[c2s] = rk[ro], rlo[ro], rhi[ro], rs[ro]
            tmp = np.zeros((n, nstates), np.int64)
            state_overlaps(jit, key[order], lo[order], hi[order], *sorted_runs[c2s], tmp)
            out[order] = tmp
        # download loss stretches by recovery round
        lr = _read(rows("loss"), ("flow_key", "start_ns", "end_ns", "episode", "round"))
        lk, llo, lhi = _i64(lr["flow_key"]), _i64(lr["start_ns"]), _i64(lr["end_ns"])
        lo_ord = _lexorder(llo, lk)
        empty = np.zeros(0, np.int64)
        size = overlap_pairs(jit, key[qo], c[qo], d[qo], lk[lo_ord], llo[lo_ord], lhi[lo_ord],
                             empty, empty, empty)
        pr, pj, pns = (np.zeros(size, np.int64) for _ in range(3))
        overlap_pairs(jit, key[qo], c[qo], d[qo], lk[lo_ord], llo[lo_ord], lhi[lo_ord], pr, pj,
                      pns)
        pair_request = qo[pr]
        pair_episode = _i64(lr["episode"])[lo_ord][pj]
        pair_round = _i64(lr["round"])[lo_ord][pj]
        # the download's gaps seen from the client, by what explains them
        pk = pauses(_read(rows("packets"), PACKET_COLUMNS))
        pkk, pts, pprev = pk["flow_key"], pk["ts_ns"], pk["prev_ns"]
        po = _lexorder(pprev, pkk)
        gaps = np.zeros((n, len(GAP_CLASSES)), np.int64)
        tmp = np.zeros((n, len(GAP_CLASSES)), np.int64)
        download_gaps(jit, key[qo], c[qo], d[qo], _i64(r["rtt_ns"])[qo], pkk[po], pts[po],
                      pprev[po], pk["prev_bytes"][po], pk["full_bytes"][po],
                      pk["last_client_ns"][po], *sorted_runs[False], tmp)
        gaps[qo] = tmp
    else:
        gaps = np.zeros((n, len(GAP_CLASSES)), np.int64)
        pair_request = pair_episode = pair_round = pns = np.zeros(0, np.int64)
    return _table(r, has_flow, a, b, c, d, up, down, gaps, pair_request, pair_episode,
                  pair_round, pns)


def _table(r, has_flow, a, b, c, d, up, down, gaps, pair_request, pair_episode, pair_round,
           pair_ns):
    n = len(a)
    nulls = ~has_flow

    def col(values, typ=pa.int64(), mask=nulls):
        return numpy_array(values, mask, typ)

    # one list of (episode, round, ns) per request, in order
    order = np.lexsort((pair_round, pair_episode, pair_request))
    pr, pe, prd, pn = pair_request[order], pair_episode[order], pair_round[order], pair_ns[order]
    offsets = np.searchsorted(pr, np.arange(n + 1)).astype(np.int32)
    rounds = pa.ListArray.from_arrays(numpy_array(offsets, None, pa.int32()), pa.StructArray.from_arrays(
        [numpy_array(pe, None), numpy_array(prd, None), numpy_array(pn, None)],
        names=["episode", "round", "ns"]))
    columns = {
        "request_key": r["request_key"],
        "capture_id": numpy_array(r["capture_id"], nulls, pa.int32()),
        "flow_id": col(np.where(has_flow, r["flow_id"], 0)),
        "a_ns": col(a, mask=None), "b_ns": col(b, mask=None), "c_ns": col(c, mask=None),
        "d_ns": col(d, mask=None),
    }
    for phase, totals in (("up", up), ("down", down)):
        for k, state in enumerate(STATES):
            columns[f"{phase}_{state}_ns"] = col(totals[:, k])
    for k, name in enumerate(GAP_CLASSES):
        columns[f"gap_{name}_ns"] = col(gaps[:, k])
    columns["loss_rounds"] = rounds
    return pa.table(columns)
