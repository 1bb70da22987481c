"""Many captures on a Dask cluster, into a Parquet dataset (store/dataset.py):
the coordinator.

A map over captures and a small reduce:

- one task per capture, on any worker: ingest the file into a DuckDB file
  of its own (in the worker's temporary folder), run the per-capture
  analyses on it (`analyze(scope="capture")`), write the capture's folder of
  the dataset and publish it with one rename. The coordinator chose the
  capture's id, so the rows are the ones a single store would hold.
- then, once, in the coordinator: the event logs, and the store-wide steps
  (requests, bounds, attribution, runs...) over views of the dataset, each
  written whole; the manifest last.

Ids are planned before anything runs and kept in `_plan.json` until the
capture is published, so that a capture that failed gets the same id when a
later run ingests it again. A capture whose task raised is retried once
(`retries=1`), a worker that died (killed, out of memory) has its task moved
to another once (`allowed-failures`); what still fails is reported per
capture and the others are kept. One writer at a time: a lock file in the
dataset.

Workers must see the capture files and the dataset's folder at the same
paths (one machine, or a shared filesystem).
"""

import contextlib
import logging
import os
import shutil
import time
from dataclasses import dataclass, field

from ...core.errors import TracekitError
from ...store import dataset
from ..dag import downstream
from .plan import Lock, plan, read_plan, write_plan
from .tasks import (
    REQUEST_STEPS,
    capture_task,
    reanalyse_task,
    request_task,
    schema,
    work_dir,
)

LOG_TABLES = ("event_logs", "events")


@dataclass
class DatasetRun:
    """What one run did: published captures, failures, duplicates, logs, steps."""

    captures: list = field(default_factory=list)  # task results (dicts), by capture id
    failures: list = field(default_factory=list)  # (path, capture id, reason)
    duplicates: list = field(default_factory=list)  # (path, capture id it is)
    logs: list = field(default_factory=list)  # LogSummary
    steps: list = field(default_factory=list)  # StepResult of the store-wide steps
    notes: list = field(default_factory=list)  # what went otherwise than planned
    seconds: float = 0.0


def local_cluster(workers):
    """A Dask LocalCluster of `workers` processes of one thread each, and its client.

    A task whose worker dies is moved to another worker once, not three times.
    The scheduler's HTTP server (dashboard, /metrics) listens on a free port:
    `None` would mean Dask's 8787, which another cluster on the machine may
    hold, and Dask then warns and moves (a warning the tests make an error).
    Workers log only what is critical: a task that fails is reported by
    tracekit in one line naming its file; Dask's "Compute Failed" record of
    it was a traceback on stderr for every try (found by
    tests/dataset_fault_campaign.py)."""
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=":0", silence_logs=logging.CRITICAL)
    return Client(cluster), cluster


@contextlib.contextmanager
def client_for(workers, cluster):
    """A Dask client and a phrase saying where it runs: of the scheduler at
    `cluster`, or of a LocalCluster of `workers` processes (default: one per
    core); closed at the end."""
    if cluster:
        client = connect(cluster)
        try:
            yield client, f"the Dask cluster at {cluster}"
        finally:
            client.close()
        return
    n = workers or os.cpu_count() or 1
    client, local = local_cluster(n)
    try:
        yield client, f"a local Dask cluster of {n:,} worker" + ("" if n == 1 else "s")
    finally:
        client.close()
        local.close()


def connect(address):
    from distributed import Client
    try:
        return Client(address, timeout="10s")
    except OSError as e:
        raise TracekitError(f"cannot reach the Dask scheduler at {address}: {e}") from None


def ingest(directory, items, logs, client, params=None, progress=None):
    """Ingest and analyse captures [(path, labels)] on `client`'s cluster and
    event logs [(ParsedLog list, labels, clock offset ns or None)] here, into
    the dataset `directory`; then the store-wide tables. Returns a DatasetRun."""
    directory = os.path.abspath(directory)
    started = time.perf_counter()
    out = DatasetRun()
    with Lock(directory):
        dataset.clear_partial(directory)
        out.notes += dataset.set_aside_damaged(directory)
        todo, out.duplicates = plan(directory, items)
        futures = {client.submit(capture_task, path, cid, labels, directory, params,
                                 key=f"capture-{cid}-{os.urandom(4).hex()}", retries=1,
                                 pure=False): (path, cid)
                   for path, labels, cid in todo}
        _collect(futures, out, progress)
        published = {r["capture_id"] for r in out.captures}
        write_plan(directory, {k: v for k, v in read_plan(directory).items()
                                if v not in published})
        out.captures.sort(key=lambda r: r["capture_id"])
        out.logs, out.steps, notes = reduce(directory, logs, params, client,
                                            failed=len(out.failures))
        out.notes += notes
        dataset.clear_partial(directory)
    out.seconds = time.perf_counter() - started
    return out


def _collect(futures, out, progress, directory=None):
    """Wait for per-capture tasks ({future: (path or None, capture id)}): each
    result into `out.captures`, each failure (the first line of what was
    raised; for a capture analysed again from the dataset `directory`, the file
    of it that cannot be read, if one cannot) into `out.failures`, reporting as
    they end."""
    from distributed import as_completed

    for n, future in enumerate(as_completed(futures), 1):
        path, cid = futures[future]
        try:
            result = future.result()
        except Exception as e:  # noqa: BLE001 -- a capture's failure is reported, not raised
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            damage = dataset.unreadable(directory, cid) if directory and path is None else None
            out.failures.append((path, cid, damage or f"{type(e).__name__}: {reason}"))
            result = None
        else:
            out.captures.append(result)
        # Released once read: a result held on a worker that dies later (one
        # killed by another capture) is otherwise computed again, and that
        # run's publishing overlapped the store-wide steps (a full-suite run
        # here lost capture 1's rows from the dataset that way)
        future.release()
        if progress:
            progress(n, len(futures), path, cid, result)


def analyze(directory, client, params=None, progress=None):
    """Analyse again the captures of a dataset whose per-capture results are of
    another version (another tracekit, other --dupthresh...), on the cluster;
    then the store-wide tables. Returns a DatasetRun."""
    from ..analyze import capture_versions

    directory = os.path.abspath(directory)
    started = time.perf_counter()
    out = DatasetRun()
    with Lock(directory):
        dataset.clear_partial(directory)
        out.notes += dataset.set_aside_damaged(directory)
        manifest = dataset.read_manifest(directory)
        import duckdb
        con = duckdb.connect()
        try:
            dataset.open_views(con, directory)
            ids = [r[0] for r in con.execute("SELECT capture_id FROM captures").fetchall()]
            current = con.execute("SELECT capture_id, analysis, version FROM analysis_runs "
                                  "WHERE capture_id > 0").fetchall()
        finally:
            con.close()
        want = capture_versions(params)
        have = {}
        for cid, analysis, version in current:
            have.setdefault(cid, {})[analysis] = version
        stale = sorted(cid for cid in ids if have.get(cid) != want)
        inputs = {n: manifest[n] for n in ("captures", "interfaces", "packets", "flows",
                                           "payloads", "tls_decrypted") if n in manifest}
        futures = {client.submit(reanalyse_task, directory, cid, inputs, params,
                                 key=f"reanalyse-{cid}-{os.urandom(4).hex()}", retries=1,
                                 pure=False): (None, cid) for cid in stale}
        _collect(futures, out, progress, directory)
        out.logs, out.steps, notes = reduce(directory, [], params, client)
        out.notes += notes
        dataset.clear_partial(directory)
    out.seconds = time.perf_counter() - started
    return out


def reduce(directory, logs, params=None, client=None, failed=0):
    """The event logs and the store-wide tables, over the dataset's captures, in
    a DuckDB file of the coordinator's; each written whole, the manifest last.
    The two per-request steps that cost most (REQUEST_STEPS) run on the
    cluster when there is one, a group of captures' requests per task.
    Returns (log summaries, store-wide StepResults, notes)."""
    import duckdb

    from ...store.db import CONFIG, MEMORY_LIMIT
    from ...store.schema import create_table_sql
    from ..analyze import analyze, store_wide_tables
    from ..logs import load_logs

    per_capture = schema()
    manifest = (dataset.read_manifest(directory)
                if os.path.exists(os.path.join(directory, dataset.MANIFEST)) else {})
    work = work_dir()
    try:
        con = duckdb.connect(os.path.join(work, "reduce.duckdb"), config=CONFIG)
        try:
            con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
            for name in (*LOG_TABLES, "analysis_runs", "analyses_in_progress",
                         "ingests_in_progress"):
                con.execute(create_table_sql(name))
            records = {}  # each capture's record read once
            for name in LOG_TABLES:  # the logs of earlier runs: new ones are numbered after
                if name in manifest:
                    con.execute(f"INSERT INTO {name} BY NAME "
                                f"{dataset.source(directory, name, manifest[name], records)}")
            entries = {n: {"columns": list(t), "types": list(t.values()), "partitioned": True}
                       for n, t in per_capture.items()}
            for name, entry in entries.items():
                if name != "analysis_runs":  # the store-wide steps' runs are this DB's own
                    con.execute(f"CREATE VIEW {name} AS "
                                f"{dataset.source(directory, name, entry, records)}")
            summaries = []
            for parsed, labels, clock_offset_ns in logs:
                summaries += load_logs(con, parsed, labels, clock_offset_ns)
            has = con.execute("SELECT (SELECT count(*) FROM captures) + "
                              "(SELECT count(*) FROM event_logs)").fetchall()[0][0]
            steps, notes = [], []
            if has and client is not None:
                # (held back: the request steps and every step that reads them)
                held = {*REQUEST_STEPS, *downstream(REQUEST_STEPS)}
                steps = analyze(con, params=params, scope="store", skip=held)
                try:
                    steps += _request_steps(con, directory, entries, client, params)
                    done = REQUEST_STEPS
                except Exception as e:  # noqa: BLE001 -- built here instead, failures isolated
                    done = ()
                    notes.append(f"request_phases and attribution were built in the coordinator: "
                                 f"their tasks failed ({type(e).__name__}: {str(e)[:300]})")
                steps += analyze(con, params=params, scope="store", skip=done)
                steps = [s for s in steps if s.built or s.failures or s.table in REQUEST_STEPS]
            elif has:
                steps = analyze(con, params=params, scope="store")
            if failed:  # over part of the captures: empty, not partial (the next analyze)
                steps, notes = [], [*notes, _left_empty(con, store_wide_tables(), failed)]
            whole = {}
            kept_whole = {*store_wide_tables(), *LOG_TABLES, "analysis_runs"}
            # events, then event_logs (a log's record), then what is built on them
            for name, types, _ in sorted(dataset.tables(con), key=_write_order):
                if name in per_capture and name in kept_whole:  # its rows of no capture
                    dataset.write_rest(con, name, types, directory)
                elif name in kept_whole:
                    whole[name] = types
                    dataset.write_whole(con, name, types, directory)
        finally:
            con.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    dataset.write_manifest(directory, {**per_capture, **whole}, per_capture)
    return summaries, steps, notes


def _write_order(table):
    return {"events": 0, "event_logs": 1}.get(table[0], 2)


def _left_empty(con, tables, failed):
    """Store-wide tables emptied (their columns kept) when captures of the run
    failed: built over what did arrive they would be wrong, not partial."""
    for schema, name in con.execute("SELECT schema_name, table_name FROM duckdb_tables() "
                                    "WHERE schema_name IN ('main', 'store')").fetchall():
        if name in tables:  # (under `store.`: the rows of the view `main.<name>`)
            con.execute(f"DELETE FROM {schema}.{name}")
    return (f"the store-wide tables (requests, attribution...) are empty: {failed:,} "
            f"capture{'' if failed == 1 else 's'} of this run failed, and tables built over "
            f"the others would be wrong; ingest the failed files again, or run tracekit "
            f"analyze --store DIR to build them over what the dataset holds")


def _request_steps(con, directory, entries, client, params):
    """request_phases and attribution, on the cluster: the requests of a group
    of captures per task (each request's rows depend on its own flow and
    bounds only), the parts gathered into the coordinator's tables."""
    started = time.perf_counter()
    work = dataset.partial_path(directory, "requests")  # where every worker can read and write
    os.makedirs(work)
    try:
        return _request_parts(con, directory, entries, client, params, work, started)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _request_parts(con, directory, entries, client, params, work, started):
    from ..analyze import StepResult, record_store_step

    inputs = {}
    for name, types, _ in dataset.tables(con):  # what the coordinator built and holds
        if name in entries or name in REQUEST_STEPS or name == "analysis_runs":
            continue
        path = os.path.join(work, name + ".parquet")
        dataset.to_parquet(con, name, types, path)
        inputs[name] = (path, types)
    counts = con.execute("SELECT capture_id, count(*) FROM requests GROUP BY 1 "
                         "ORDER BY 1 NULLS LAST").fetchall()
    workers = max(1, len(client.scheduler_info()["workers"]))
    target = max(1, sum(n for _, n in counts) // (4 * workers))
    groups, group, size = [], [], 0
    for cid, n in counts:
        group.append(cid)
        size += n
        if size >= target:
            groups.append(group)
            group, size = [], 0
    if group:
        groups.append(group)
    futures = [client.submit(request_task, directory, entries, inputs, g, params,
                             key=f"requests-{i}-{os.urandom(4).hex()}", retries=1, pure=False)
               for i, g in enumerate(groups)]
    parts = client.gather(futures)
    results = []
    for table in REQUEST_STEPS:
        files = [p[table][0] for p in parts]
        types = parts[0][table][1] if parts else None
        con.execute(f"DROP TABLE IF EXISTS {table}")
        if files:
            listed = "[" + ", ".join(dataset.quote(f) for f in files) + "]"
            con.execute(f"CREATE TABLE {table} AS SELECT {dataset.as_stored(types)} "
                        f"FROM read_parquet({listed})")
        rows = sum(p[table][2] for p in parts)
        seconds = time.perf_counter() - started
        record_store_step(con, table, rows, seconds, params)
        results.append(StepResult(table, built=1, rows=rows, seconds=seconds, scope="store"))
    return results

