"""request_phases' inputs (steps/phases.py), as SQL, and how a partition
of flows gets its rows of them.

Two ways, the same rows. Few partitions (at most DIRECT_PARTS): the
requests' instants and the download loss stretches are read once and split
by partition in memory (a row per request, a row per loss stretch), and
each partition reads its stall runs and packets from the tables, a scan of
each per partition. Many partitions (a large store): each input is read
once and written out by partition (DuckDB's partitioned COPY into a scratch
folder beside the store), so that a partition reads its own rows only
rather than scanning the tables again (their rows are in time order, every
flow's spread over all of them), a cost that grows with the square of the
capture. Measured on the mixed capture (2.9 M packets, 11 partitions;
CPU s): the Parquet round trip 1.40 (written 0.86, read back 0.54), the
direct reads 1.03.
"""

import os

import numpy as np

from ...store.arrow import fetch_numpy as _fetch, numpy_array, whole
from ...store.db import settings
from .stalls import STATES

DIRECT_PARTS = 16  # partitions read straight from the tables; more: spilled

INSTANTS_SQL = """
WITH r AS (
    SELECT q.request_key, q.capture_id, q.flow_id, q.start_ns, q.end_ns, b.rtt_ns,
        q.request_first_byte_ns AS a0, q.request_last_byte_ns AS b0,
        q.response_first_byte_ns AS c0, q.response_last_byte_ns AS d0
    FROM requests q JOIN bounds b USING (request_key)
),
cut AS (SELECT *, greatest(start_ns, least(coalesce(a0, start_ns), end_ns)) AS a FROM r),
cut2 AS (SELECT *, greatest(a, least(coalesce(b0, a), end_ns)) AS b FROM cut),
cut3 AS (SELECT *, greatest(b, least(coalesce(c0, b), end_ns)) AS c FROM cut2)
SELECT request_key, coalesce(capture_id, 0) AS capture_id, coalesce(flow_id, 0) AS flow_id,
       coalesce(capture_id, 0) * 4294967296 + coalesce(flow_id, 0) AS flow_key,
       capture_id IS NOT NULL AS has_flow, coalesce(rtt_ns, 0) AS rtt_ns,
       a, b, c, greatest(c, least(coalesce(d0, c), end_ns)) AS d,
       coalesce(m.part, $no_flow) AS part
FROM cut3 LEFT JOIN _phase_flows m USING (capture_id, flow_id)
"""

RUNS_SQL = """
SELECT s.capture_id * 4294967296 + s.flow_id AS flow_key, s.direction = 'c2s' AS c2s,
       s.start_ns, s.end_ns, list_position($states, s.state) - 1 AS state, m.part
FROM stalls s JOIN _phase_flows m USING (capture_id, flow_id)
"""

# each download loss stretch (a loss_recovery or rto_wait run of the server's
# data) belongs to the recovery round that had begun when it began
LOSS_ROUNDS_SQL = """
SELECT s.capture_id * 4294967296 + s.flow_id AS flow_key, s.start_ns, s.end_ns,
       rr.episode, rr.round, m.part
FROM (SELECT * FROM stalls WHERE direction = 's2c' AND state IN ('loss_recovery', 'rto_wait')) s
JOIN _phase_flows m USING (capture_id, flow_id)
ASOF JOIN (SELECT capture_id, flow_id, episode, round, first_ts_ns FROM recovery_rounds
           WHERE direction = 's2c') rr
  ON rr.capture_id = s.capture_id AND rr.flow_id = s.flow_id AND s.start_ns >= rr.first_ts_ns
"""

# the server's data packets on flows seen from the client (or QUIC, whose ACKs
# are encrypted), with what the ACK clock needs: the previous data packet of the
# server (time, size), the client's last packet before, the full segment size
PACKETS_SQL = """
SELECT t.capture_id * 4294967296 + t.flow_id AS flow_key, t.frame, t.ts_ns, t.from_client,
       t.payload_bytes, m.client_mss IS NOT NULL AS has_mss,
       coalesce(m.client_mss - 40, 0) AS full_bytes, m.part
FROM packets t JOIN _phase_flows m USING (capture_id, flow_id)
WHERE m.pauses AND (t.payload_bytes > 0 OR t.from_client)
"""
PACKET_COLUMNS = ("flow_key", "frame", "ts_ns", "from_client", "payload_bytes", "has_mss",
                  "full_bytes")

# a partition's rows (the range of flows it holds, implied by `part`, is
# there so that the scan skips other flows' rows before the join)
RUNS_PART_SQL = RUNS_SQL + "WHERE m.part = $part AND s.capture_id = $cid " \
                           "AND s.flow_id BETWEEN $lo AND $hi\n"
PACKETS_PART_SQL = PACKETS_SQL + "  AND m.part = $part AND t.capture_id = $cid " \
                                 "AND t.flow_id BETWEEN $lo AND $hi\n"

PARTS_SQL = """
WITH rf AS (SELECT DISTINCT capture_id, flow_id FROM requests WHERE capture_id IS NOT NULL),
s AS (SELECT capture_id, flow_id, count(*) AS n FROM stalls GROUP BY ALL)
SELECT s.capture_id, s.flow_id, s.n + f.packets_s2c AS runs
FROM s JOIN rf USING (capture_id, flow_id) JOIN flows f USING (capture_id, flow_id)
ORDER BY ALL
"""


def scratch_dir(con):
    """The store's folder (where DuckDB spills too), or the system's for a store in memory."""
    (path,), = con.execute("SELECT path FROM duckdb_databases() "
                           "WHERE database_name = current_database()").fetchall()
    return os.path.dirname(os.path.abspath(path)) if path else None


def spill(con, parts, tmp):
    """Each input written to tmp/<name>/part=<k>/ (flow_parts first)."""
    # each partition's rows written out every 64 k rows rather than DuckDB's
    # 512 k: the stall runs of 29 M packets (101 partitions) took 9.4 s to
    # write with the default, 4.1 s so
    with settings(con, partitioned_write_flush_threshold=65536):
        for name, sql, params in (("instants", INSTANTS_SQL, {"no_flow": len(parts) - 1}),
                                  ("runs", RUNS_SQL, {"states": list(STATES)}),
                                  ("loss", LOSS_ROUNDS_SQL, {}), ("packets", PACKETS_SQL, {})):
            path = os.path.join(tmp, name).replace("'", "''")
            con.execute(f"COPY ({sql}) TO '{path}' (FORMAT parquet, PARTITION_BY (part), "
                        f"COMPRESSION uncompressed)", params)


def flow_parts(con, parts):
    """Each flow with requests and its partition (temp._phase_flows), with whether
    its download gaps are wanted (seen from the client, or QUIC) and the MSS
    its client announced."""
    con.execute("CREATE OR REPLACE TEMP TABLE _phase_parts "
                "(capture_id INTEGER, lo BIGINT, hi BIGINT, part INTEGER)")
    rows = [(cid, lo, hi, k) for k, (cid, lo, hi) in enumerate(parts) if cid is not None]
    if rows:  # (none when no request has a flow: an event log alone, or only UDP)
        con.executemany("INSERT INTO _phase_parts VALUES (?, ?, ?, ?)", rows)
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _phase_flows AS
        WITH rf AS (
            SELECT capture_id, flow_id, bool_or(vantage <> 'server') AS not_server
            FROM requests WHERE capture_id IS NOT NULL GROUP BY ALL
        )
        SELECT rf.capture_id, rf.flow_id, p.part,
            rf.not_server OR coalesce(f.protocol = 'udp', false) AS pauses, f.client_mss
        FROM rf LEFT JOIN flows f USING (capture_id, flow_id)
        JOIN _phase_parts p ON p.capture_id = rf.capture_id AND rf.flow_id BETWEEN p.lo AND p.hi""")


def _part_files(tmp, name, k):
    """A partition's files of one input (read_parquet's argument), or None: no rows."""
    folder = os.path.join(tmp, name, f"part={k}")
    quoted = folder.replace("'", "''")
    return f"read_parquet('{quoted}/*.parquet', hive_partitioning = false)" \
        if os.path.isdir(folder) else None


def direct(con, parts):
    """A reader of each partition's rows (`read(k)(name)` -> columns, or None:
    none) straight from the tables (flow_parts first)."""
    once = {"instants": _split(fetch_keyed(con, INSTANTS_SQL, {"no_flow": len(parts) - 1}),
                               len(parts)),
            "loss": _split(_fetch(con, LOSS_ROUNDS_SQL), len(parts))}

    def read(k):
        cid, lo, hi = parts[k]

        def rows(name):
            if name in once:
                return once[name][k]
            if cid is None:
                return None
            sql, params = {"runs": (RUNS_PART_SQL, {"states": list(STATES)}),
                           "packets": (PACKETS_PART_SQL, {})}[name]
            r = _fetch(con, sql, {**params, "part": k, "cid": cid, "lo": lo, "hi": hi})
            return r if len(r["part"]) else None
        return rows
    return read


def spilled(con, tmp):
    """A reader of each partition's rows from the files `spill` wrote."""
    def read(k):
        def rows(name):
            files = _part_files(tmp, name, k)
            if files is None:
                return None
            read = fetch_keyed if name == "instants" else _fetch
            return read(con, f"SELECT * FROM {files}")
        return rows
    return read


def fetch_keyed(con, sql, params=None):
    """{column: numpy array} of a query's result, but `request_key` an Arrow
    string array: a column of 482 k keys made Python strings to fetch, split
    and encode again for the table cost ~0.3 CPU s (the mixed capture). (The
    numbers are read from the Arrow buffers: pyarrow's to_numpy() and take()
    of a numpy array import pandas, half a second.)"""
    t = con.sql(sql, params=params or None).to_arrow_table()
    return {c: (whole(t.column(c)) if c == "request_key" else _numbers(whole(t.column(c))))
            for c in t.column_names}


def _numbers(column):
    """A numeric or boolean Arrow array as numpy (a NULL as 0 or false; the
    instants' SQL leaves none)."""
    n, (valid, data) = len(column), column.buffers()[:2]
    if not n:
        return np.zeros(0, bool if str(column.type) == "bool" else np.int64)
    if str(column.type) == "bool":
        values = _bits(data, column.offset, n)
    else:
        dtype = np.dtype({"double": "float64"}.get(str(column.type), str(column.type)))
        values = np.frombuffer(data, dtype, count=n, offset=column.offset * dtype.itemsize)
    return np.where(_bits(valid, column.offset, n), values, 0).astype(values.dtype) \
        if column.null_count else values


def _bits(buffer, offset, n):
    return np.unpackbits(np.frombuffer(buffer, np.uint8), bitorder="little")[offset:offset + n] \
        .astype(bool)


def _split(r, parts):
    """Columns split by their `part` ([columns or None for each partition])."""
    order = np.argsort(r["part"], kind="stable")
    ends = np.searchsorted(r["part"][order], np.arange(parts + 1))
    return [{c: _take(v, order[ends[k]:ends[k + 1]]) for c, v in r.items()}
            if ends[k + 1] > ends[k] else None for k in range(parts)]


def _take(values, rows):
    return values[rows] if isinstance(values, np.ndarray) else values.take(numpy_array(rows))


