"""`tracekit analyze`: build the derived tables, only what new captures need.

Each analysis is a step (pipeline/stepkinds.py), run in the order of the
analysis DAG (pipeline/dag.py: each after the steps that write what it
reads, from the SQL files' headers and the code steps' declarations):

- code steps (tracekit/pipeline/steps/): compiled kernels over one capture at a
  time, streaming it in chunks of frames (memory bounded whatever its size);
- SQL steps (analyses/<table>.sql): one query over a batch of consecutive
  captures (`capture_id BETWEEN $first AND $last`), so a store of a
  thousand small captures costs a few queries, not thousands;
- views (analyses/<view>.sql): per-packet projections of `tcp_analysis`
  (ACK gaps, bytes in flight, RTT samples) that cost more to store than to
  compute when read, and a request's attributes (request_attributes, over
  the store-wide requests and events); created once;
- store steps: tables built from the whole store at once (events and every
  capture: requests, bounds, attribution...).

The table `analysis_runs` records, per analysis and capture, the version (a
hash of the code or SQL text and of the versions of the steps it reads) it
was built with: a capture already built with the current version is skipped,
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
import time

import duckdb

from ..core.errors import TracekitError
from ..core.jit import PYTHON_COST, prefer_compiled
from ..store.db import settings
from ..store.recovery import recover_analyses
from ..store.schema import STAGED, storage
from . import dag
from .runner import install_macros
from .storewide import StoreWide, discard_leftovers, inputs_fingerprint
from .stepkinds import (
    CodeStep,
    CodeStoreStep,
    PartitionedStoreStep,
    ONE_TRANSACTION_PACKETS,
    SqlStep,
    StepResult,
    StoreStep,
    ViewStep,
    exists,
)

BATCH_PACKETS = 2_000_000  # SQL steps: consecutive captures per query, up to this many packets
SMALL_BATCH_PACKETS = 250_000  # code steps: small captures per transaction, up to this many
ANALYZE_MEMORY_LIMIT = "256MB"  # DuckDB's share while analysing: peak RSS stays under 1 GiB


def _inputs_fingerprint(con):
    return inputs_fingerprint(con, {})


def _steps(params=None):
    """Every step, in DAG order (tracekit.pipeline.dag), each with its version."""
    nodes = dag.order()
    steps = [_step(n, params) for n in nodes]
    own = {n.name: step.version() for n, step in zip(nodes, steps)}
    for step, version in zip(steps, dag.versions(own, nodes).values()):
        step.dag_version = version
    return steps


def _step(node, params):
    if node.module is not None:
        return CodeStep(node.module, params) if node.kind == "capture" else CodeStoreStep(node.module)
    if node.kind == "view":
        return ViewStep(node.name, node.reads)
    return {"capture": SqlStep, "store": StoreStep,
            "store, in parts": PartitionedStoreStep}[node.kind](node.name)


def store_wide_tables():
    """Tables built over the whole store at once (not per capture)."""
    return {t for step in _steps() if step.scope == "store" for t in step.tables}


def create_capture_tables(con):
    """The per-capture analyses' tables, empty (their columns without running
    them), and the views they read."""
    for step in _steps():
        if step.scope == "capture" or (step.scope == "view" and step.ready(con)):
            step.create(con)


def capture_versions(params=None):
    """{analysis: version} of the per-capture steps, as `analyze` would record them."""
    return {step.table: step.dag_version for step in _steps(params) if step.scope == "capture"}


def record_store_step(con, table, rows, seconds, params=None):
    """Record a store-wide table built outside `analyze` (by the cluster) as
    `analyze` records its own builds: the next analyze finds it up to date."""
    version = next(step.dag_version for step in _steps(params) if step.table == table)
    stamped = hashlib.sha256((version + _inputs_fingerprint(con)).encode()).hexdigest()[:16]
    con.execute("DELETE FROM analysis_runs WHERE analysis = ?", [table])
    con.execute("INSERT INTO analysis_runs VALUES (?, 0, ?, ?, ?, now(), NULL)",
                [table, stamped, rows, seconds])


def create_views(con):
    """The analyses' views (rtt_samples, ack_gaps, inflight, request_attributes)
    over `con`'s tables, each whose tables are there."""
    for step in _steps():
        if step.scope == "view" and step.ready(con):
            step.create(con)


def stale_views(con, names):
    """Of the views `names`, those the store holds from an older version of
    their SQL (analysis_runs): `tracekit analyze` creates them again."""
    current = {s.table: s.dag_version for s in _steps() if s.scope == "view" and s.table in names}
    held = dict(con.execute("SELECT analysis, version FROM analysis_runs WHERE capture_id = 0 "
                            "AND analysis IN (SELECT unnest(?))", [sorted(current)]).fetchall())
    return sorted(n for n, v in current.items() if held.get(n, v) != v)


def analyze(con, progress=None, params=None, scope="all", checkpoint=True, skip=()):
    """Bring every derived table up to date; return a StepResult per step.

    `progress(table, capture_id)` is called as each step starts on a batch of
    captures (capture 0: a store-wide step); one whose attribute
    `takes_share` is true is called `progress(table, capture_id, done,
    total)` in the per-capture steps, done and total in packets of the
    captures that step analyses in this run.

    `params` overrides the thresholds of the segment classification
    (transport/sequence.py PARAMETERS: dupthresh, rto_min_ns,
    reorder_window_ns); they are part of the version, so a change rebuilds
    tcp_analysis and everything after it. `scope` "capture" runs only the
    per-capture steps (and views), "store" only the store-wide ones (and
    views): a dataset's tasks and its coordinator (tracekit/pipeline/cluster/).
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
    discard_leftovers(con)
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
        install_macros(con)
        install_macros(writer)
        results = []
        store = StoreWide(con)
        try:
            _run_steps(con, writer, store, captures, progress, params, scope, skip, results)
            store.commit()
        finally:
            store.discard()
        if checkpoint:
            con.execute("CHECKPOINT")
    finally:
        writer.close()
    return results


def _run_steps(con, writer, store, captures, progress, params, scope, skip, results):
    failed = set()  # captures an earlier step could not process
    for step in _steps(params):
        # a step's version covers the steps it reads: their change rebuilds it too
        version = step.dag_version
        if (scope != "all" and step.scope not in (scope, "view")) or step.table in skip:
            continue
        if step.scope == "store":
            results.append(store.build(step, progress, storage_failed, _reason))
        elif step.scope == "view":
            if scope != "capture" or step.ready(con):  # (a capture's task: no store-wide table)
                results.append(_build_view(con, step, version))
        else:
            result = _build_capture_step(con, writer, step, version, captures, failed, progress)
            failed |= {cid for cid, _ in result.failures}
            failed |= _failed_before(con, step)
            results.append(result)


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
    # an error row does not mark a capture analysed: the next analyze tries it again
    con.execute("DELETE FROM analysis_runs WHERE analysis = ? AND error IS NOT NULL "
                "AND capture_id <> 0", [step.table])
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
    total, done, before = sum(captures[c] for c in pending), {}, 0
    for cid in pending:  # the packets of the step's captures built before each
        done[cid], before = before, before + captures[cid]

    def report(cid):
        if progress and getattr(progress, "takes_share", False):
            # (the step's share done, in packets of its pending captures: for an ETA)
            progress(step.table, cid, done[cid], total)
        elif progress:
            progress(step.table, cid)
    for batch in _batches(pending, captures, step):
        each = isinstance(step, CodeStep) and len(batch) > 1  # a code step's: capture by capture
        if not each:
            report(batch[0])
        try:
            counts = _write_batch(con, writer, step, version, batch, report if each else None)
        except (duckdb.Error, TracekitError, ArithmeticError, ValueError) as e:
            _unless_storage_failed(e)
            if len(batch) > 1:  # find the capture it cannot take, keep the others
                counts = {}
                for cid in batch:
                    try:
                        counts.update(_write_batch(con, writer, step, version, [cid]))
                    except (duckdb.Error, TracekitError, ArithmeticError, ValueError) as e1:
                        _unless_storage_failed(e1)
                        _record_failure(writer, step, version, cid, e1)
                        result.failures.append((cid, _reason(e1)))
            else:
                _record_failure(writer, step, version, batch[0], e)
                result.failures.append((batch[0], _reason(e)))
                counts = {}
        result.built += len(counts)
        result.rows += sum(counts.values())


def _batches(pending, captures, step):
    """Consecutive capture ids, up to BATCH_PACKETS packets a batch; code steps:
    captures small enough for one transaction together, a larger one alone."""
    batch, size = [], 0
    for cid in pending:
        n = captures[cid]
        if batch and not _joins(step, batch, cid, captures, size + n):
            yield batch
            batch, size = [], 0
        batch.append(cid)
        size += n
    if batch:
        yield batch


def _joins(step, batch, cid, captures, size):
    """Whether capture `cid` joins `batch` (`size`: their packets together)."""
    if isinstance(step, CodeStep):  # (a batch of a code step holds small captures only)
        return (max(captures[batch[-1]], captures[cid]) <= ONE_TRANSACTION_PACKETS
                and size <= SMALL_BATCH_PACKETS)
    return isinstance(step, SqlStep) and cid == batch[-1] + 1 and size <= BATCH_PACKETS


def _write_batch(con, writer, step, version, batch, report=None):
    """Build one batch on `writer`; `con` reads committed tables (`report`:
    called with each capture of a code step's batch as it starts)."""
    if isinstance(step, CodeStep):
        if len(batch) > 1:
            return step.build_small(con, writer, batch, version, report)
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


def storage_failed(e):
    """Whether `e` is the store's device failing (full, or an I/O error), not a
    capture or an analysis: then no capture is to blame."""
    text = str(e)
    return (isinstance(e, (OSError, duckdb.IOException)) or "No space left on device" in text
            or "Could not write file" in text)


def _unless_storage_failed(e):
    """Stop the command on a full disk or an I/O error (what is committed stays;
    the next analyze builds the rest) rather than recording it against a capture."""
    if storage_failed(e):
        raise e


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
    if current and exists(con, step.table):
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


def _delete(con, table, capture_id):
    if table in STAGED:
        if exists(con, table, schema="store"):
            con.execute(f"DELETE FROM store.{table} WHERE capture_id = ?", [capture_id])
    elif exists(con, table, "BASE TABLE"):
        con.execute(f"DELETE FROM {table} WHERE capture_id = ?", [capture_id])
