"""What a Dask worker runs for a dataset (see tracekit/pipeline/cluster/__init__.py):
a capture ingested and analysed, a capture analysed again, the per-request
tables of a group of captures. Each works in a DuckDB database of its own
and writes Parquet files; none prints.
"""

import glob
import os
import shutil
import tempfile
import time

from ...store import dataset

REQUEST_STEPS = ("request_phases", "attribution")  # per request: spread over the cluster
WORK_PREFIX = "tracekit-task-"  # + pid of the process that made it


def work_dir():
    """A temporary folder for one task's DuckDB file. A worker that was killed
    (out of memory, kill -9, the tests' fault) could not remove its own: the
    folders of processes that no longer exist on this host are removed first."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        pid = name[len(WORK_PREFIX):].split("-")[0]
        if name.startswith(WORK_PREFIX) and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _fault_before_publish(capture_id):
    """Fault injection for the tests: TRACEKIT_FAULT_BEFORE_PUBLISH=ID:FILE kills
    this worker process once (FILE records that it did), ID:always every time,
    when capture ID is written and not yet published."""
    spec = os.environ.get("TRACEKIT_FAULT_BEFORE_PUBLISH")
    if not spec:
        return
    cid, _, flag = spec.partition(":")
    if int(cid) != capture_id:
        return
    if flag != "always":
        try:
            os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    os._exit(70)


def _partitioned(con):
    from ..analyze import store_wide_tables
    whole = store_wide_tables()
    return {n: t for n, t, _ in dataset.tables(con) if "capture_id" in t and n not in whole}


def capture_task(path, capture_id, labels, directory, params=None):
    """Ingest and analyse one capture; publish its folder of the dataset."""
    from ...store.db import connect
    from ..analyze import analyze
    from ..captures import load_captures

    started = time.perf_counter()
    work = work_dir()
    try:
        con = connect(os.path.join(work, "capture.duckdb"))
        try:
            summary, = load_captures(con, [path], labels=labels, first_capture_id=capture_id)
            steps = analyze(con, params=params, scope="capture", checkpoint=False)
            # (run again when the worker holding its result died: what the
            # first run published stays, never swapped under a reader)
            dataset.write_capture(con, capture_id, directory, _partitioned(con),
                                  before_publish=_fault_before_publish, replace=False)
        finally:
            con.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stop = summary.read_stop
    return {"capture_id": capture_id, "path": path, "packets": summary.packets,
            "flows": summary.flows, "decode_status": dict(summary.decode_status),
            "read_stop": None if stop is None else (stop.reason, stop.offset, stop.message),
            "analysis_failures": [(r.table, reason) for r in steps for _, reason in r.failures],
            "seconds": time.perf_counter() - started}


def schema():
    """{table: {column: type}} of every per-capture table, from an empty store."""
    from ...store.db import connect
    from ..analyze import create_capture_tables

    work = work_dir()
    try:
        con = connect(os.path.join(work, "schema.duckdb"))
        try:
            create_capture_tables(con)
            return _partitioned(con)
        finally:
            con.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def reanalyse_task(directory, capture_id, inputs, params=None):
    """Load one capture's ingested tables from the dataset into a DuckDB file of
    its own, analyse it, publish its folder again (the old one swapped out)."""
    from ...store.db import connect
    from ...store.schema import storage
    from ..analyze import analyze

    started = time.perf_counter()
    work = work_dir()
    try:
        con = connect(os.path.join(work, "capture.duckdb"))
        try:
            con.execute("BEGIN")
            for name, entry in inputs.items():
                path = os.path.join(dataset.capture_dir(directory, capture_id, name), "*.parquet")
                if not glob.glob(path):  # no rows of this capture (an exported dataset)
                    continue
                types = {c: t for c, t in zip(entry["columns"], entry["types"])
                         if c != "capture_id"}  # (the folder's name holds it)
                con.execute(f"INSERT INTO {storage(name)} BY NAME SELECT "
                            f"{dataset.as_stored(types)}, {int(capture_id)} AS capture_id "
                            f"FROM read_parquet({dataset.quote(path)})")
            con.execute("COMMIT")
            steps = analyze(con, params=params, scope="capture", checkpoint=False)
            dataset.write_capture(con, capture_id, directory, _partitioned(con))
        finally:
            con.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"capture_id": capture_id, "path": None, "packets": None, "flows": None,
            "decode_status": {}, "read_stop": None,
            "analysis_failures": [(r.table, reason) for r in steps for _, reason in r.failures],
            "seconds": time.perf_counter() - started}


def request_task(directory, entries, inputs, group, params=None):
    """request_phases and attribution for the requests of the captures in
    `group` (None: the requests linked to no flow), over the dataset's views;
    each written to a Parquet file of the coordinator's to gather."""
    import duckdb

    from ...store.db import CONFIG, MEMORY_LIMIT
    from ..analyze import PartitionedStoreStep
    from ..steps import phases

    con = duckdb.connect(config=CONFIG)
    try:
        con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        records = {}  # each capture's record read once
        for name, entry in entries.items():
            if name != "analysis_runs":
                con.execute(f"CREATE VIEW {name} AS "
                            f"{dataset.source(directory, name, entry, records)}")
        ids = [int(c) for c in group if c is not None]
        where = (f"(capture_id IN ({', '.join(map(str, ids)) or 'NULL'}) "
                 f"OR (capture_id IS NULL AND {None in group}))")
        for name in ("requests", "bounds", *(n for n in inputs if n not in ("requests", "bounds"))):
            path, types = inputs[name]
            read = f"SELECT {dataset.as_stored(types)} FROM read_parquet({dataset.quote(path)})"
            if name == "requests":
                con.execute(f"CREATE TABLE requests AS {read} WHERE {where}")
            elif name == "bounds":
                con.execute(f"CREATE TABLE bounds AS {read} WHERE request_key IN "
                            f"(SELECT request_key FROM requests)")
            else:
                con.execute(f"CREATE VIEW {name} AS {read}")
        phases.build_all(con, "request_phases")
        PartitionedStoreStep("attribution").write_all(con, "attribution")
        out = {}
        token = os.urandom(6).hex()
        for table in REQUEST_STEPS:
            types = {r[0]: r[1] for r in con.execute(f"DESCRIBE {table}").fetchall()}
            path = os.path.join(os.path.dirname(inputs["requests"][0]), f"{table}-{token}.parquet")
            dataset.to_parquet(con, table, types, path)
            rows = con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
            out[table] = (path, types, rows)
        return out
    finally:
        con.close()
