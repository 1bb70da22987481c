"""`tracekit analyze`: build the derived tables, only what new captures need.

Each analysis is a step: a kernel in tracekit/transport (code) or a SQL file
in analyses/ whose final SELECT is run once per capture with $capture_id.
Steps run in the order of `_steps()`, each after the tables it reads. The
table `analysis_runs` records, per analysis and capture, the version (a hash
of the code or SQL text) it was built with: a capture already built with the
current version is skipped, and a changed version rebuilds that analysis for
every capture. A version also covers the steps before it, so a change
upstream rebuilds everything downstream. Each (analysis, capture) is
written in one transaction, so an interrupted run leaves complete results
behind and the next run resumes.
"""

import hashlib
import inspect
import json
import re
import time

from .errors import QueryError, TracekitError
from .runner import analysis_sql
from .store.schema import create_table_sql


FINAL_ORDER = re.compile(r"SELECT \* FROM final ORDER BY[^\n]*\s*$")


class CodeStep:
    """A table built by `module.build(con, capture_id)`; its version hashes the
    source of that module and of the modules it names in `SOURCES`."""

    def __init__(self, table, module, params=None):
        self.table = table
        self.module = module
        self.params = {k: v for k, v in (params or {}).items()
                       if k in getattr(module, "PARAMETERS", {})}

    def version(self):
        digest = hashlib.sha256()
        for m in (self.module, *getattr(self.module, "SOURCES", ())):
            digest.update(inspect.getsource(m).encode())
        settings = {**getattr(self.module, "PARAMETERS", {}), **self.params}
        digest.update(json.dumps(settings, sort_keys=True).encode())
        return digest.hexdigest()[:16]

    def write(self, con, capture_id):
        table = self.module.build(con, capture_id, **self.params)
        con.execute(create_table_sql(self.table))
        con.register("_tracekit_rows", table)
        try:
            con.execute(f"INSERT INTO {self.table} SELECT * FROM _tracekit_rows")
        finally:
            con.unregister("_tracekit_rows")
        return table.num_rows


class SqlStep:
    def __init__(self, table):
        self.table = table

    def version(self):
        return hashlib.sha256(analysis_sql(self.table).encode()).hexdigest()[:16]

    def write(self, con, capture_id):
        # a table has no order: skip the final ORDER BY the file keeps for reading
        sql = FINAL_ORDER.sub("SELECT * FROM final\n", analysis_sql(self.table))
        head = (f"INSERT INTO {self.table}" if _exists(con, self.table)
                else f"CREATE TABLE {self.table} AS")
        try:
            con.execute(f"{head} SELECT * FROM (\n{sql}\n)", {"capture_id": capture_id})
        except Exception as e:  # a bug in an analysis: name it
            raise QueryError(f"analyses/{self.table}.sql failed: {str(e).splitlines()[0]}") from None
        return con.execute(f"SELECT count(*) FROM {self.table} WHERE capture_id = ?",
                           [capture_id]).fetchall()[0][0]


class StoreStep(SqlStep):
    """A table built from the whole store at once (events and every capture):
    rebuilt when its version or its inputs (captures and event logs, and
    when they last changed) differ from the last build."""

    scope = "store"

    def write_all(self, con):
        sql = FINAL_ORDER.sub("SELECT * FROM final\n", analysis_sql(self.table))
        try:
            con.execute(f"CREATE OR REPLACE TABLE {self.table} AS SELECT * FROM (\n{sql}\n)")
        except Exception as e:
            raise QueryError(f"analyses/{self.table}.sql failed: {str(e).splitlines()[0]}") from None
        return con.execute(f"SELECT count(*) FROM {self.table}").fetchall()[0][0]


def _inputs_fingerprint(con):
    rows = con.execute("""
        SELECT 'c', capture_id, ingested_at::VARCHAR FROM captures
        UNION ALL SELECT 'l', log_id, updated_at::VARCHAR FROM event_logs
        ORDER BY 1, 2""").fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def _steps(params=None):
    from .transport import sequence, stalls, tls
    return [CodeStep("tcp_analysis", sequence, params), CodeStep("tls_messages", tls),
            SqlStep("retransmissions"),
            SqlStep("recovery_rounds"), SqlStep("rtt_samples"), SqlStep("rtt_summary"),
            SqlStep("ack_gaps"), SqlStep("inflight"), SqlStep("flights"),
            CodeStep("stalls", stalls), SqlStep("handshakes"),
            StoreStep("requests"), StoreStep("playback"),
            StoreStep("underruns"), StoreStep("playback_buffer"), StoreStep("playback_sessions"),
            StoreStep("serving"), StoreStep("serving_batches"), StoreStep("bounds"),
            StoreStep("attribution"), StoreStep("runs")]


def analyze(con, progress=None, params=None):
    """Bring every derived table up to date; return [(analysis, captures built, rows, s)].

    `params` overrides the thresholds of the segment classification
    (transport/sequence.py PARAMETERS: dupthresh, rto_min_ns,
    reorder_window_ns); they are part of the version, so a change rebuilds
    tcp_analysis and everything after it.
    """
    captures = [r[0] for r in con.execute("SELECT capture_id FROM captures ORDER BY 1").fetchall()]
    logs = con.execute("SELECT count(*) FROM event_logs").fetchall()[0][0]
    if not captures and not logs:
        raise TracekitError("the database holds no captures or event logs; ingest some first "
                            "(tracekit ingest FILE...)")
    _forget_replaced(con)
    # one checkpoint at the end instead of one per step (each step commits)
    con.execute("SET checkpoint_threshold = '16GB'")
    summary = []
    upstream = ""
    for step in _steps(params):
        # a step depends on the ones before it: their change rebuilds it too
        version = hashlib.sha256((upstream + step.version()).encode()).hexdigest()[:16]
        upstream = version
        if getattr(step, "scope", "capture") == "store":
            summary.append(_build_store_step(con, step, version, progress))
            continue
        stale = con.execute("SELECT count(*) FROM analysis_runs WHERE analysis = ? AND version <> ?",
                            [step.table, version]).fetchall()[0][0]
        if stale:
            con.execute("BEGIN")
            con.execute(f"DROP TABLE IF EXISTS {step.table}")
            con.execute("DELETE FROM analysis_runs WHERE analysis = ?", [step.table])
            con.execute("COMMIT")
        done = {r[0] for r in con.execute(
            "SELECT capture_id FROM analysis_runs WHERE analysis = ?", [step.table]).fetchall()}
        built = rows = 0
        started = time.perf_counter()
        for cid in captures:
            if cid in done:
                continue
            if progress:
                progress(step.table, cid)
            t0 = time.perf_counter()
            con.execute("BEGIN")
            try:
                _delete(con, step.table, cid)
                n = step.write(con, cid)
                con.execute("INSERT INTO analysis_runs VALUES (?, ?, ?, ?, ?, now())",
                            [step.table, cid, version, n, time.perf_counter() - t0])
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            built += 1
            rows += n
        if not _exists(con, step.table):  # no captures yet: later steps still read it
            con.execute("BEGIN")
            _create_empty(con, step)
            con.execute("COMMIT")
        summary.append((step.table, built, rows, time.perf_counter() - started))
    con.execute("CHECKPOINT")
    con.execute("RESET checkpoint_threshold")
    return summary


def _build_store_step(con, step, version, progress):
    stamped = hashlib.sha256((version + _inputs_fingerprint(con)).encode()).hexdigest()[:16]
    current = con.execute("SELECT count(*) FROM analysis_runs WHERE analysis = ? AND version = ?",
                          [step.table, stamped]).fetchall()[0][0]
    if current and _exists(con, step.table):
        return (step.table, 0, 0, 0.0)
    if progress:
        progress(step.table, 0)
    t0 = time.perf_counter()
    con.execute("BEGIN")
    try:
        n = step.write_all(con)
        con.execute("DELETE FROM analysis_runs WHERE analysis = ?", [step.table])
        con.execute("INSERT INTO analysis_runs VALUES (?, 0, ?, ?, ?, now())",
                    [step.table, stamped, n, time.perf_counter() - t0])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return (step.table, 1, n, time.perf_counter() - t0)


def _create_empty(con, step):
    if isinstance(step, CodeStep):
        con.execute(create_table_sql(step.table))
        return
    sql = FINAL_ORDER.sub("SELECT * FROM final\n", analysis_sql(step.table))
    con.execute(f"CREATE TABLE {step.table} AS SELECT * FROM (\n{sql}\n) LIMIT 0",
                {"capture_id": 0})


def _forget_replaced(con):
    """Drop results of captures that were removed or ingested again since."""
    gone = con.execute("""
        SELECT DISTINCT r.analysis, r.capture_id FROM analysis_runs r
        LEFT JOIN captures c USING (capture_id)
        WHERE r.capture_id <> 0 AND (c.capture_id IS NULL OR r.built_at < c.ingested_at)""").fetchall()
    if not gone:
        return
    con.execute("BEGIN")
    for table, cid in gone:
        _delete(con, table, cid)
        con.execute("DELETE FROM analysis_runs WHERE analysis = ? AND capture_id = ?", [table, cid])
    con.execute("COMMIT")


def _exists(con, table):
    return con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?",
                       [table]).fetchall()[0][0] > 0


def _delete(con, table, capture_id):
    if _exists(con, table):
        con.execute(f"DELETE FROM {table} WHERE capture_id = ?", [capture_id])
