"""`tracekit analyze`: build the derived tables, only what new captures need.

Each analysis is a step, run in the order of `_steps()`, each after the
tables it reads:

- code steps (tracekit/transport): compiled kernels over one capture at a
  time, streaming it in chunks of frames (memory bounded whatever its size);
- SQL steps (analyses/<table>.sql): one query over a batch of consecutive
  captures (`capture_id BETWEEN $first AND $last`), so a store of a
  thousand small captures costs a few queries, not thousands;
- views (analyses/<view>.sql): per-packet projections of `tcp_analysis`
  (ACK gaps, bytes in flight, RTT samples) that cost more to store than to
  compute when read; created once;
- store steps: tables built from the whole store at once (events and every
  capture: requests, bounds, attribution...).

The table `analysis_runs` records, per analysis and capture, the version (a
hash of the code or SQL text, chained over every step before it) it was
built with: a capture already built with the current version is skipped,
and a changed version rebuilds that analysis for every capture. Each
(analysis, batch) is written in one transaction, so an interrupted run
leaves complete results behind and the next run resumes.

Failure isolation: a batch that fails is retried capture by capture; a
capture an analysis cannot process is recorded in `analysis_runs` with the
reason (`error`) and left out of the steps after it; every other capture is
analysed and every view works for what was analysed. A store step that
fails leaves its table empty (never stale), records the reason, and the
steps after it run; the next analyze tries it again.
"""

import contextlib
import hashlib
import inspect
import json
import re
import time
from dataclasses import dataclass, field

import duckdb

from ..core.errors import QueryError, TracekitError
from ..core.jit import PYTHON_COST, prefer_compiled
from ..store.db import settings
from ..store.recovery import discard_analysis, recover_analyses
from ..store.schema import STAGED, create_table_sql, storage
from .runner import analysis_sql

FINAL_ORDER = re.compile(r"SELECT \* FROM final ORDER BY[^\n]*\s*$")
BATCH_PACKETS = 2_000_000  # SQL steps: consecutive captures per query, up to this many packets
ANALYZE_MEMORY_LIMIT = "256MB"  # DuckDB's share while analysing: peak RSS stays under 1 GiB
ONE_TRANSACTION_PACKETS = 1 << 18  # code steps: captures this small are built in one transaction


@dataclass
class StepResult:
    """What one step did: captures built, rows, seconds, failures [(capture, reason)]."""

    table: str
    built: int = 0
    rows: int = 0
    seconds: float = 0.0
    failures: list = field(default_factory=list)
    scope: str = "capture"

    def __iter__(self):  # (table, built, rows, seconds), as callers unpack it
        return iter((self.table, self.built, self.rows, self.seconds))


class CodeStep:
    """Tables built by `module.build(con, writer, capture_id, **params)`; its
    version hashes the source of that module and the modules in `SOURCES`."""

    scope = "capture"

    def __init__(self, module, params=None):
        self.module = module
        self.tables = tuple(module.TABLES)
        self.table = self.tables[0]
        self.params = {k: v for k, v in (params or {}).items()
                       if k in getattr(module, "PARAMETERS", {})}

    def version(self):
        digest = hashlib.sha256()
        for m in (self.module, *getattr(self.module, "SOURCES", ())):
            digest.update(inspect.getsource(m).encode())
        settings = {**getattr(self.module, "PARAMETERS", {}), **self.params}
        digest.update(json.dumps(settings, sort_keys=True).encode())
        return digest.hexdigest()[:16]

    def create(self, con):
        for table in self.tables:
            con.execute(create_table_sql(table))

    def build_one(self, con, writer, capture_id, version):
        """Build one capture; return its rows.

        A large capture is written in many short transactions (one big one
        keeps every row in memory until it commits): a row in
        `analyses_in_progress` hides it from the tables' views meanwhile, and
        the last transaction removes that row as it records the build.
        """
        (packets,), = con.execute("SELECT packets FROM captures WHERE capture_id = ?",
                                  [capture_id]).fetchall()
        small = packets <= ONE_TRANSACTION_PACKETS  # then one transaction is cheaper
        for table in self.tables:  # rows an earlier build left
            writer.execute(f"DELETE FROM {storage(table)} WHERE capture_id = ?", [capture_id])
        if small:
            writer.execute("BEGIN")
        else:
            writer.execute("INSERT INTO analyses_in_progress VALUES (?, ?, now())",
                           [self.table, capture_id])
        t0 = time.perf_counter()
        try:
            out = self.module.build(con, writer, capture_id, **self.params)
            if not small:
                writer.execute("BEGIN")
            writer.execute("DELETE FROM analyses_in_progress WHERE analysis = ? AND capture_id = ?",
                           [self.table, capture_id])
            writer.execute("INSERT INTO analysis_runs VALUES (?, ?, ?, ?, ?, now(), NULL)",
                           [self.table, capture_id, version, out[self.table],
                            time.perf_counter() - t0])
            writer.execute("COMMIT")
        except BaseException:
            if _in_transaction(writer):
                writer.execute("ROLLBACK")
            discard_analysis(writer, self.table, capture_id)
            raise
        return out[self.table]


class SqlStep:
    """A table built by analyses/<table>.sql over a range of captures."""

    scope = "capture"

    def __init__(self, table):
        self.table = table
        self.tables = (table,)

    def version(self):
        return hashlib.sha256(analysis_sql(self.table).encode()).hexdigest()[:16]

    def _sql(self):
        # a table has no order: skip the final ORDER BY the file keeps for reading
        return FINAL_ORDER.sub("SELECT * FROM final\n", analysis_sql(self.table))

    def create(self, con):
        if not _exists(con, self.table):
            try:
                con.execute(f"CREATE TABLE {self.table} AS SELECT * FROM (\n{self._sql()}\n) "
                            f"LIMIT 0", {"first": 0, "last": -1})
            except duckdb.Error as e:
                raise QueryError(f"analyses/{self.table}.sql failed: "
                                 f"{str(e).splitlines()[0]}") from None

    def write(self, con, writer, captures):
        first, last = min(captures), max(captures)
        try:
            writer.execute(f"INSERT INTO {self.table} SELECT * FROM (\n{self._sql()}\n)",
                           {"first": first, "last": last})
        except duckdb.Error as e:  # a bug in an analysis, or data it cannot take: name it
            raise QueryError(f"analyses/{self.table}.sql failed: {str(e).splitlines()[0]}") from None
        counts = dict(writer.execute(
            f"SELECT capture_id, count(*) FROM {self.table} WHERE capture_id BETWEEN ? AND ? "
            f"GROUP BY ALL", [first, last]).fetchall())
        return {cid: counts.get(cid, 0) for cid in captures}


class ViewStep:
    """A view over per-capture tables (analyses/<name>.sql); nothing is stored."""

    scope = "view"

    def __init__(self, name):
        self.table = name
        self.tables = (name,)

    def version(self):
        return hashlib.sha256(analysis_sql(self.table).encode()).hexdigest()[:16]

    def create(self, con):
        sql = FINAL_ORDER.sub("SELECT * FROM final\n", analysis_sql(self.table))
        if _exists(con, self.table, "BASE TABLE"):  # a table of an older version
            con.execute(f"DROP TABLE {self.table}")
        con.execute(f"CREATE OR REPLACE VIEW {self.table} AS {sql}")


class StoreStep(SqlStep):
    """A table built from the whole store at once (events and every capture):
    rebuilt when its version or its inputs (captures and event logs, and
    when they last changed) differ from the last build."""

    scope = "store"

    def write_all(self, con, target):
        sql = FINAL_ORDER.sub("SELECT * FROM final\n", analysis_sql(self.table))
        try:
            con.execute(f"CREATE OR REPLACE TABLE {target} AS SELECT * FROM (\n{sql}\n)")
        except duckdb.Error as e:
            raise QueryError(f"analyses/{self.table}.sql failed: {str(e).splitlines()[0]}") from None
        return con.execute(f"SELECT count(*) FROM {target}").fetchall()[0][0]


class PartitionedStoreStep(StoreStep):
    """A store step over the requests, run in parts of at most PART_REQUESTS
    requests (attribution), so that its memory is bounded by a part whatever
    the store holds. The request tables are bucketed once by a hash of
    `request_key` and sorted by bucket (O(n log n)); each part then shadows
    `requests`, `bounds` and `request_phases` with temporary views of its own
    rows (DuckDB reads the temporary schema first), found by the bucket's zone
    map, so that a part costs its own size, not the store's (views, not
    copies: the copies cost 0.3-0.5 s a part of 100 k requests). The SQL
    is the same for one part or many: it reads whatever those names hold."""

    PART_REQUESTS = 100_000
    PART_TABLES = ("requests", "bounds", "request_phases")

    def write_all(self, con, target):
        sql = FINAL_ORDER.sub("SELECT * FROM final\n", analysis_sql(self.table))
        (n,), = con.execute("SELECT count(*) FROM requests").fetchall()
        parts = max(1, -(-n // self.PART_REQUESTS))
        try:
            if parts == 1:
                con.execute(f"CREATE OR REPLACE TABLE main.{target} AS SELECT * FROM (\n{sql}\n)")
            else:
                for t in self.PART_TABLES:
                    con.execute(f"CREATE OR REPLACE TEMP TABLE _bucketed_{t} AS SELECT *, "
                                f"hash(request_key) % {parts} AS _bucket FROM main.{t} "
                                f"ORDER BY _bucket")
                for part in range(parts):
                    for t in self.PART_TABLES:
                        con.execute(f"CREATE OR REPLACE TEMP VIEW {t} AS SELECT * EXCLUDE (_bucket) "
                                    f"FROM _bucketed_{t} WHERE _bucket = {part}")
                    head = (f"CREATE OR REPLACE TABLE main.{target} AS" if part == 0
                            else f"INSERT INTO main.{target}")
                    con.execute(f"{head} SELECT * FROM (\n{sql}\n)")
        except duckdb.Error as e:
            raise QueryError(f"analyses/{self.table}.sql failed: {str(e).splitlines()[0]}") from None
        finally:
            for t in self.PART_TABLES:
                con.execute(f"DROP VIEW IF EXISTS temp.{t}")
                con.execute(f"DROP TABLE IF EXISTS temp._bucketed_{t}")
        return con.execute(f"SELECT count(*) FROM main.{target}").fetchall()[0][0]


class CodeStoreStep:
    """A table built by `module.build_all(con)` from the whole store."""

    scope = "store"

    def __init__(self, module):
        self.module = module
        self.table = module.TABLES[0]
        self.tables = tuple(module.TABLES)

    def version(self):
        return hashlib.sha256(inspect.getsource(self.module).encode()).hexdigest()[:16]

    def write_all(self, con, target):
        return self.module.build_all(con, target)


def _inputs_fingerprint(con):
    rows = con.execute("""
        SELECT 'c', capture_id, ingested_at::VARCHAR FROM captures
        UNION ALL SELECT 'l', log_id, updated_at::VARCHAR FROM event_logs
        UNION ALL SELECT 'f', capture_id, analysis FROM analysis_runs WHERE error IS NOT NULL
        ORDER BY 1, 2, 3""").fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def _steps(params=None):
    from .steps import phases, sequence, stalls, tls
    return [CodeStep(sequence, params), CodeStep(tls),
            SqlStep("retransmissions"), SqlStep("recovery_rounds"),
            ViewStep("rtt_samples"), SqlStep("rtt_summary"),
            ViewStep("ack_gaps"), ViewStep("inflight"),
            CodeStep(stalls), SqlStep("handshakes"),
            StoreStep("requests"), StoreStep("playback"),
            StoreStep("underruns"), StoreStep("playback_buffer"), StoreStep("playback_sessions"),
            StoreStep("serving"), StoreStep("serving_batches"), StoreStep("bounds"),
            CodeStoreStep(phases), PartitionedStoreStep("attribution"), StoreStep("runs"),
            StoreStep("spurious_verdicts")]


def store_wide_tables():
    """Tables built over the whole store at once (not per capture)."""
    return {t for step in _steps() if step.scope == "store" for t in step.tables}


def create_capture_tables(con):
    """The per-capture analyses' tables, empty (their columns without running
    them), and the views they read."""
    for step in _steps():
        if step.scope in ("capture", "view"):
            step.create(con)


def capture_versions(params=None):
    """{analysis: version} of the per-capture steps, as `analyze` would record them."""
    out, upstream = {}, ""
    for step in _steps(params):
        upstream = hashlib.sha256((upstream + step.version()).encode()).hexdigest()[:16]
        if step.scope == "capture":
            out[step.table] = upstream
    return out


def record_store_step(con, table, rows, seconds, params=None):
    """Record a store-wide table built outside `analyze` (by the cluster) as
    `analyze` records its own builds: the next analyze finds it up to date."""
    upstream = ""
    for step in _steps(params):
        upstream = hashlib.sha256((upstream + step.version()).encode()).hexdigest()[:16]
        if step.table == table:
            break
    stamped = hashlib.sha256((upstream + _inputs_fingerprint(con)).encode()).hexdigest()[:16]
    con.execute("DELETE FROM analysis_runs WHERE analysis = ?", [table])
    con.execute("INSERT INTO analysis_runs VALUES (?, 0, ?, ?, ?, now(), NULL)",
                [table, stamped, rows, seconds])


def create_views(con):
    """The analyses' views (rtt_samples, ack_gaps, inflight) over `con`'s tables."""
    for step in _steps():
        if step.scope == "view":
            step.create(con)


def analyze(con, progress=None, params=None, scope="all", checkpoint=True, skip=()):
    """Bring every derived table up to date; return a StepResult per step.

    `params` overrides the thresholds of the segment classification
    (transport/sequence.py PARAMETERS: dupthresh, rto_min_ns,
    reorder_window_ns); they are part of the version, so a change rebuilds
    tcp_analysis and everything after it. `scope` "capture" runs only the
    per-capture steps (and views), "store" only the store-wide ones (and
    views): a dataset's tasks and its coordinator (tracekit/cluster/).
    `checkpoint=False` leaves the results in the write-ahead log (a task's
    throwaway store); steps named in `skip` are left alone (the cluster
    builds them).
    """
    captures = dict(con.execute("SELECT capture_id, packets FROM captures ORDER BY 1").fetchall())
    logs = con.execute("SELECT count(*) FROM event_logs").fetchall()[0][0]
    if not captures and not logs:
        raise TracekitError("the database holds no captures or event logs; ingest some first "
                            "(tracekit ingest FILE...)")
    recover_analyses(con)
    _forget_replaced(con)
    # compiled kernels pay a start-up cost once per process: worth it for the whole run
    # when the captures to analyse are large together, even if each is small
    prefer_compiled(sum(captures.values()) * PYTHON_COST)
    # (one checkpoint at the end instead of one per step: each step commits)
    with settings(con, memory_limit=ANALYZE_MEMORY_LIMIT, checkpoint_threshold="16GB"):
        return _analyze_steps(con, captures, progress, params, scope, checkpoint, skip)


def _analyze_steps(con, captures, progress, params, scope, checkpoint, skip):
    writer = con.cursor()
    try:
        results = []
        upstream = ""
        failed = set()  # captures an earlier step could not process
        for step in _steps(params):
            # a step depends on the ones before it: their change rebuilds it too
            version = hashlib.sha256((upstream + step.version()).encode()).hexdigest()[:16]
            upstream = version
            if (scope != "all" and step.scope not in (scope, "view")) or step.table in skip:
                continue
            if step.scope == "store":
                results.append(_build_store_step(con, step, version, progress))
            elif step.scope == "view":
                results.append(_build_view(con, step, version))
            else:
                result = _build_capture_step(con, writer, step, version, captures, failed,
                                             progress)
                failed |= {cid for cid, _ in result.failures}
                failed |= _failed_before(con, step)
                results.append(result)
        if checkpoint:
            con.execute("CHECKPOINT")
    finally:
        writer.close()
    return results


def _failed_before(con, step):
    return {r[0] for r in con.execute(
        "SELECT capture_id FROM analysis_runs WHERE analysis = ? AND error IS NOT NULL",
        [step.table]).fetchall()}


def _build_capture_step(con, writer, step, version, captures, failed, progress):
    result = StepResult(step.table)
    stale = con.execute("SELECT count(*) FROM analysis_runs WHERE analysis = ? AND version <> ?",
                        [step.table, version]).fetchall()[0][0]
    if stale:
        con.execute("BEGIN")
        for table in step.tables:
            if table in STAGED:
                con.execute(f"DROP VIEW IF EXISTS {table}")
            con.execute(f"DROP TABLE IF EXISTS {storage(table)}")
        con.execute("DELETE FROM analysis_runs WHERE analysis = ?", [step.table])
        con.execute("COMMIT")
    step.create(con)
    done = {r[0] for r in con.execute(
        "SELECT capture_id FROM analysis_runs WHERE analysis = ?", [step.table]).fetchall()}
    pending = [cid for cid in captures if cid not in done and cid not in failed]
    started = time.perf_counter()
    # A code step's appends are written by both of DuckDB's threads, as
    # ingest's are: with insertion order kept, one thread writes them, and
    # the writer thread held tcp_analysis back (2 M rows of its 50 columns in
    # appends of two row groups: 4.6 s in order, 2.4 s not; see
    # store/writer.py APPEND_ROWS). Its readers sort what they read by frame
    # (they must anyway).
    parallel = (settings(con, preserve_insertion_order=False) if isinstance(step, CodeStep)
                else contextlib.nullcontext())
    with parallel:
        _build_batches(con, writer, step, version, captures, pending, result, progress)
    result.seconds = time.perf_counter() - started
    return result


def _build_batches(con, writer, step, version, captures, pending, result, progress):
    for batch in _batches(pending, captures, step):
        if progress:
            progress(step.table, batch[0])
        try:
            counts = _write_batch(con, writer, step, version, batch)
        except (duckdb.Error, TracekitError, ArithmeticError, ValueError) as e:
            if len(batch) > 1:  # find the capture it cannot take, keep the others
                counts = {}
                for cid in batch:
                    try:
                        counts.update(_write_batch(con, writer, step, version, [cid]))
                    except (duckdb.Error, TracekitError, ArithmeticError, ValueError) as e1:
                        _record_failure(writer, step, version, cid, e1)
                        result.failures.append((cid, _reason(e1)))
            else:
                _record_failure(writer, step, version, batch[0], e)
                result.failures.append((batch[0], _reason(e)))
                counts = {}
        result.built += len(counts)
        result.rows += sum(counts.values())


def _batches(pending, captures, step):
    """Consecutive capture ids, up to BATCH_PACKETS packets a batch (code steps: one each)."""
    batch, size = [], 0
    for cid in pending:
        n = captures[cid]
        if batch and (not isinstance(step, SqlStep) or cid != batch[-1] + 1
                      or size + n > BATCH_PACKETS):
            yield batch
            batch, size = [], 0
        batch.append(cid)
        size += n
    if batch:
        yield batch


def _in_transaction(con):
    try:
        con.execute("BEGIN")
    except duckdb.TransactionException:
        return True
    con.execute("ROLLBACK")
    return False


def _write_batch(con, writer, step, version, batch):
    """Build one batch on `writer`; `con` reads committed tables."""
    if isinstance(step, CodeStep):
        return {cid: step.build_one(con, writer, cid, version) for cid in batch}
    t0 = time.perf_counter()
    writer.execute("BEGIN")
    try:
        for table in step.tables:  # rows an earlier build left (tls-keys asks for a rebuild)
            writer.execute(f"DELETE FROM {table} WHERE capture_id BETWEEN ? AND ?",
                           [min(batch), max(batch)])
        counts = step.write(con, writer, batch)
        seconds = (time.perf_counter() - t0) / len(batch)
        writer.executemany("INSERT INTO analysis_runs VALUES (?, ?, ?, ?, ?, now(), NULL)",
                           [[step.table, cid, version, counts.get(cid, 0), seconds]
                            for cid in batch])
        writer.execute("COMMIT")
    except BaseException:
        writer.execute("ROLLBACK")
        raise
    return counts


def _reason(e):
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:500]


def _record_failure(writer, step, version, cid, e):
    writer.execute("INSERT INTO analysis_runs VALUES (?, ?, ?, 0, 0, now(), ?)",
                   [step.table, cid, version, _reason(e)])


def _build_view(con, step, version):
    current = con.execute("SELECT count(*) FROM analysis_runs WHERE analysis = ? AND version = ?",
                          [step.table, version]).fetchall()[0][0]
    result = StepResult(step.table, scope="view")
    if current and _exists(con, step.table):
        return result
    t0 = time.perf_counter()
    con.execute("BEGIN")
    try:
        step.create(con)
        con.execute("DELETE FROM analysis_runs WHERE analysis = ?", [step.table])
        con.execute("INSERT INTO analysis_runs VALUES (?, 0, ?, 0, ?, now(), NULL)",
                    [step.table, version, time.perf_counter() - t0])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    result.built = 1
    result.seconds = time.perf_counter() - t0
    return result


def _build_store_step(con, step, version, progress):
    stamped = hashlib.sha256((version + _inputs_fingerprint(con)).encode()).hexdigest()[:16]
    current = con.execute("SELECT count(*) FROM analysis_runs WHERE analysis = ? AND version = ?",
                          [step.table, stamped]).fetchall()[0][0]
    result = StepResult(step.table, scope="store")
    if current and _exists(con, step.table):
        return result
    if progress:
        progress(step.table, 0)
    t0 = time.perf_counter()
    # built under another name, its rows committed as they come (a transaction
    # would hold all of them in memory until it commits: the store's size),
    # then swapped in with the version stamp in one short transaction
    building = f"{step.table}__building"
    con.execute(f"DROP TABLE IF EXISTS {building}")
    try:
        try:
            n = step.write_all(con, building)
        except (duckdb.Error, TracekitError, ArithmeticError, ValueError) as e:
            _store_step_failed(con, step, time.perf_counter() - t0, e)
            result.failures.append((0, _reason(e)))
            return result
        con.execute("BEGIN")
        try:
            con.execute(f"DROP TABLE IF EXISTS {step.table}")
            con.execute(f"ALTER TABLE {building} RENAME TO {step.table}")
            con.execute("DELETE FROM analysis_runs WHERE analysis = ?", [step.table])
            con.execute("INSERT INTO analysis_runs VALUES (?, 0, ?, ?, ?, now(), NULL)",
                        [step.table, stamped, n, time.perf_counter() - t0])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    finally:
        con.execute(f"DROP TABLE IF EXISTS {building}")
    result.built, result.rows, result.seconds = 1, n, time.perf_counter() - t0
    return result


def _store_step_failed(con, step, seconds, e):
    """A store-wide table that could not be built is left empty, not stale, with
    the reason in `analysis_runs` (no version: the next analyze tries again);
    the steps after it still run."""
    if _in_transaction(con):  # a part of it was being written
        con.execute("ROLLBACK")
    con.execute("BEGIN")
    try:
        for table in getattr(step, "tables", (step.table,)):
            if _exists(con, table, "BASE TABLE"):
                con.execute(f"DELETE FROM {table}")
        con.execute("DELETE FROM analysis_runs WHERE analysis = ?", [step.table])
        con.execute("INSERT INTO analysis_runs VALUES (?, 0, 'failed', 0, ?, now(), ?)",
                    [step.table, seconds, _reason(e)])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _forget_replaced(con):
    """Drop results of captures that were removed or ingested again since."""
    gone = con.execute("""
        SELECT DISTINCT r.analysis, r.capture_id FROM analysis_runs r
        LEFT JOIN captures c USING (capture_id)
        WHERE r.capture_id <> 0 AND (c.capture_id IS NULL OR r.built_at < c.ingested_at)""").fetchall()
    if not gone:
        return
    tables = {s.table: s.tables for s in _steps()}
    con.execute("BEGIN")
    for analysis, cid in gone:
        for table in tables.get(analysis, (analysis,)):
            _delete(con, table, cid)
        con.execute("DELETE FROM analysis_runs WHERE analysis = ? AND capture_id = ?",
                    [analysis, cid])
    con.execute("COMMIT")


def _exists(con, table, kind=None, schema="main"):
    sql = ("SELECT count(*) FROM information_schema.tables WHERE table_name = ? "
           "AND table_schema = ?")
    args = [table, schema]
    if kind:
        sql += " AND table_type = ?"
        args.append(kind)
    return con.execute(sql, args).fetchall()[0][0] > 0


def _delete(con, table, capture_id):
    if table in STAGED:
        if _exists(con, table, schema="store"):
            con.execute(f"DELETE FROM store.{table} WHERE capture_id = ?", [capture_id])
    elif _exists(con, table, "BASE TABLE"):
        con.execute(f"DELETE FROM {table} WHERE capture_id = ?", [capture_id])
