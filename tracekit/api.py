"""tracekit as a library: open a store, ingest, analyse, ask -- what the CLI
does, without the printing. The store is an ordinary DuckDB database; `sql`
and `table` hand back DuckDB relations (`.df()`, `.arrow()`, `.fetchall()`).

    import tracekit

    with tracekit.open("runs.duckdb") as store:
        store.ingest(["client.pcap", "client-events.jsonl"], labels={"path": "direct"})
        store.analyze()
        store.sql("SELECT span, sum(ns) / 1e6 AS ms FROM attribution GROUP BY span").df()
        store.view("attribute")                      # what `tracekit attribute` prints
        store.ablation("path", by=["connection"])    # what `tracekit ablation` prints

The module's functions (`ingest`, `analyze`, `export`, `import_dataset`,
`lab_*`) take a store's path: they also serve a Parquet dataset on Dask,
and create or remove the store as the command needs. The CLI is these calls
plus printing.
"""

import os

from .core.errors import TracekitError
from .readers.formats import INPUT_FORMATS  # noqa: F401 (what --format accepts)


class Store:
    """One tracekit store (a DuckDB file); a context manager that closes it."""

    def __init__(self, path=None, read_only=False):
        from .pipeline.stores import open_store
        from .store.db import default_db_path
        self.path = str(path or default_db_path())
        self.con = open_store(self.path, read_only=read_only)

    def ingest(self, files, labels=None, replace=False, clock_offset_ns=None, log_format=None,
               time_ns=None):
        """Ingest captures and event logs (told apart by their first bytes) in one
        transaction: all of them, or none. `time_ns` dates the files that carry no
        time of their own (bench reports, harness TSV, bare /metrics scrapes).
        Returns (capture summaries, log summaries)."""
        from .pipeline.ingest import Inputs, ingest_into
        from .readers.capture.formats import split_inputs
        from .readers.events import read_logs
        captures, logs = split_inputs(files)
        inputs = Inputs(captures, read_logs(logs, log_format, time_ns), logs, [])
        done = ingest_into(self.con, inputs, labels, replace, clock_offset_ns)
        return done.captures, done.logs

    def analyze(self, progress=None, params=None):
        """Bring every derived table up to date; a StepResult per step."""
        from .pipeline.analyze import analyze
        return analyze(self.con, progress, params)

    def sql(self, query, params=None):
        """A DuckDB relation of any query over the store's tables and views."""
        return self.con.sql(query, params=params)

    def table(self, name):
        """A DuckDB relation of one table or view (docs/tables.md lists them)."""
        return self.con.table(name)

    def rows(self, name, **params):
        """(columns, rows) of analyses/<name>.sql with its parameters: what a
        view of the CLI prints, before formatting."""
        from .pipeline.runner import run_analysis
        return run_analysis(self.con, name, **params)

    def query(self, text):
        """(columns, rows) of any SQL statement, or None when it returns no rows
        (a DDL statement); a DuckDB error becomes a QueryError."""
        import duckdb

        from .core.errors import QueryError
        try:
            cur = self.con.execute(text)
        except duckdb.Error as e:
            raise QueryError(f"query failed: {str(e).splitlines()[0]}") from None
        if cur.description is None:
            return None
        return [d[0] for d in cur.description], cur.fetchall()

    def view(self, name, **params):
        """A CLI view as a pandas DataFrame: attribute, handshakes, retransmissions,
        rounds, stalls, acks, rtt, requests, playback, underruns, serving. Filters as
        the CLI's: capture_id, flow_id (transport views) or run (application views)."""
        import pandas as pd

        from .presentation.views import BY_NAME
        if name not in BY_NAME:
            raise TracekitError(f"no view named {name!r}; known: {', '.join(BY_NAME)}")
        columns, rows = self.rows(f"views/{name}", **{**BY_NAME[name].defaults(), **params})
        return pd.DataFrame(rows, columns=columns)

    def comparisons(self, compare, by=(), levels=None, where=None, predict=None):
        """The ablation's Comparison objects (presentation.ablation); `predict`:
        None for none, () for the what-if replay (or, for a factor it does not
        know, the factor's default spans), or span names."""
        from .presentation.ablation import ablation, replayed
        from .presentation.ablation import predict as predicted
        results = ablation(self.con, compare, by=tuple(by), levels=levels, where=where)
        if predict is not None:
            for c in results:
                c.prediction = (None if predict else
                                replayed(self.con, c, compare, tuple(by), where))
                if c.prediction is None:
                    c.prediction = predicted(c, compare, tuple(predict) or None)
        return results

    def ablation(self, compare, by=(), levels=None, where=None, predict=False):
        """The table `tracekit ablation` prints, as a pandas DataFrame (times in ms);
        `predict` adds the counterfactual columns (`--predict`)."""
        import pandas as pd

        from .presentation.table import ablation_rows
        results = self.comparisons(compare, by, levels, where, () if predict else None)
        columns, rows = ablation_rows(results, tuple(by), predictions=predict)
        return pd.DataFrame(rows, columns=columns)

    def whatif(self, set, where=None, source=None, by=(), draws=None, assume=None):  # noqa: A002
        """What-if (docs/whatif.md): the requests matching `where` and `source`
        ({factor: level}, the group measured) replayed under `set` ({factor:
        level}, the change); one (group, WhatIf) per combination of the `by`
        labels. Factors: tracekit.whatif.factors. Values may be strings."""
        from .presentation.whatif import run
        from .whatif.engine import DRAWS
        return run(self.con, dict(where or {}), _levels(source), _levels(set), tuple(by),
                   draws or DRAWS, _levels(assume))

    def interactions(self, source, target, where=None):
        """Shapley split of median(source) - median(target) over the factors that
        differ ({label: level} each: any labels, not only the what-if's factors),
        with bootstrap intervals and the pairs' interaction terms
        (tracekit.whatif.shapley.Split)."""
        from .whatif.shapley import split
        return split(self.con, dict(where or {}), dict(source), dict(target))

    def require_analyzed(self):
        """Raise unless `tracekit analyze` has built the derived tables."""
        n = self.con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = "
                             "'handshakes'").fetchall()[0][0]
        if not n:
            raise TracekitError(f"{self.path} has not been analysed yet; run: tracekit analyze "
                                f"--db {self.path}")

    def check(self, capture_id=None, flow_id=None, run=None, log_id=None, where=None):
        """An id the store does not hold is an error, not an empty table
        (`where` names the store in the message about a log)."""
        con = self.con
        if capture_id is not None and not con.execute(
                "SELECT count(*) FROM captures WHERE capture_id = ?", [capture_id]).fetchall()[0][0]:
            raise TracekitError(f"no capture {capture_id} in the store (tracekit captures lists them)")
        if flow_id is not None and not con.execute(
                "SELECT count(*) FROM flows WHERE flow_id = ? AND (? IS NULL OR capture_id = ?)",
                [flow_id, capture_id, capture_id]).fetchall()[0][0]:
            where = f" of capture {capture_id}" if capture_id is not None else ""
            raise TracekitError(f"no flow {flow_id}{where} in the store (tracekit sessions lists them)")
        if run is not None and not con.execute(
                "SELECT count(*) FROM events WHERE run = $r", {"r": run}).fetchall()[0][0] and not \
                con.execute("SELECT count(*) FROM runs WHERE run = $r", {"r": run}).fetchall()[0][0]:
            raise TracekitError(f"no run {run!r} in the store (tracekit sql \"SELECT run FROM runs\" "
                                f"and the events' run field name them)")
        if log_id is not None and not con.execute(
                "SELECT count(*) FROM event_logs WHERE log_id = ?", [log_id]).fetchall()[0][0]:
            raise TracekitError(f"no event log {log_id} in {where or self.path} (see tracekit "
                                f"sql 'FROM event_logs')")

    def capture_ids(self):
        """The ids of the ingested captures, in order."""
        return [r[0] for r in self.con.execute(
            "SELECT capture_id FROM captures ORDER BY 1").fetchall()]

    def estimate_clock(self, log_id, capture_id):
        """A ClockEstimate of event log `log_id`'s offset against a capture's clock."""
        from .presentation.clock import estimate_offset
        self.check(log_id=log_id)
        return estimate_offset(self.con, log_id, capture_id)

    def apply_clock(self, log_id, estimate):
        """Move the log's events by a ClockEstimate (the analyses rebuild next time)."""
        from .pipeline.logs import set_clock_offset
        set_clock_offset(self.con, log_id, estimate.offset_ns, "estimated", estimate.uncertainty_ns)

    def tls_keys(self, capture_id, keylog):
        """Decrypt a capture's TLS with a key log (tshark); rebuild its handshakes.
        Returns the number of decrypted messages."""
        from .pipeline.analyze import analyze
        from .pipeline.steps.keylog import load_keys
        n = load_keys(self.con, capture_id, keylog)
        analyze(self.con)
        return n

    def close(self):
        self.con.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _levels(levels):
    """{factor: value} checked against the vocabulary (strings or values)."""
    from .whatif.factors import ALIASES, value
    return {ALIASES.get(k, k): value(ALIASES.get(k, k), str(v)) for k, v in (levels or {}).items()}


def open(path=None, read_only=False):  # noqa: A001 - tracekit.open, like sqlite3.connect
    """Open (creating if needed) the store at `path` (default: $TRACEKIT_DB or
    ./tracekit.duckdb); `read_only` for a store you must not change
    ("auto": read-only when the file cannot be written)."""
    return Store(os.fspath(path) if path is not None else None, read_only)


def open_dataset(directory):
    """A read-only DuckDB connection whose views are the tables of a Parquet
    dataset (`tracekit export --parquet DIR`): `.sql(...)` as on a store."""
    from .pipeline.stores import open_dataset as dataset
    return dataset(str(directory))


def ingest(db=None, files=(), manifests=(), labels=None, replace=False, input_format="auto",
           clock_offset_ns=None, time_ns=None, progress=None, workers=None, cluster=None,
           dataset_progress=None):
    """Ingest files and manifests' runs into the store or dataset `db`
    (pipeline.ingest.ingest); returns an Ingested."""
    from .pipeline.ingest import ingest as run
    return run(db, files, manifests, labels, replace, input_format, clock_offset_ns, time_ns,
               progress, workers, cluster, dataset_progress)


def on_dataset(db, workers=None, cluster=None):
    """Whether `db` is a Parquet dataset (analysed on Dask)."""
    from .pipeline.ingest import on_dask
    from .store.db import default_db_path
    return on_dask(str(db or default_db_path()), workers, cluster)


def analyze(db=None, params=None, progress=None, workers=None, cluster=None,
            dataset_progress=None):
    """Bring every derived table of `db` up to date: a StepResult per step for
    a store; for a dataset (on Dask) a (DatasetRun, where) pair."""
    if on_dataset(db, workers, cluster):
        from .pipeline import cluster as engine
        with engine.client_for(workers, cluster) as (client, where):
            run = engine.analyze(db, client, params, progress=dataset_progress)
        return run, where
    with open(db) as store:
        return store.analyze(progress, params)


def export(db, directory):
    """Write the store as a Parquet dataset in a new folder; {table: rows}."""
    from .pipeline.analyze import store_wide_tables
    from .store.dataset import export as write
    with open(db, read_only=True) as store:
        return write(store.con, directory, whole=store_wide_tables())


def import_dataset(directory, db):
    """Fill a new store from a Parquet dataset; {table: rows}."""
    from .store.dataset import import_into
    with open(db) as store:
        return import_into(store.con, directory)


def lab_plan(experiment):
    """(spec, [(trial, order, factor levels, settings)]) of an experiment file."""
    from .lab import experiment as ex
    spec = ex.load(experiment)
    return spec, [(trial, order, combo, ex.settings_of(spec, combo))
                  for trial, order, combo in ex.schedule(spec)]


def lab_run(experiment, workdir, db, progress=None, resume=False, on_runs_done=None):
    """Run an experiment file (root), then ingest every run with its labels into
    `db`. `on_runs_done(busy)` is called between the runs and the ingest with the
    runs the machine disturbed. Returns (spec, manifests, disturbed runs)."""
    from .lab import experiment as ex
    from .pipeline.ingest import ingest_runs
    from .pipeline.manifests import run_inputs
    spec = ex.load(experiment)
    os.makedirs(workdir, exist_ok=True)
    manifests = ex.run_experiment(spec, workdir, progress, resume)
    busy = ex.disturbed(manifests)
    if on_runs_done:
        on_runs_done(busy)
    with open(db) as store:
        ingest_runs(store.con, run_inputs(manifests, workdir))
    return spec, manifests, busy


def lab_clean(force=False):
    """Remove what crashed lab runs left; the lines saying what was done."""
    from .lab import cleanup
    return list(cleanup.clean(force))


def parse_time(text, option="--time"):
    """An RFC 3339 time -> int ns since the epoch (TracekitError if it is not one
    within 1677-2262, what int64 nanoseconds hold)."""
    from .readers.events.logfmt import rfc3339_ns
    ns = rfc3339_ns(text)
    if ns is None or not -(1 << 63) < ns < (1 << 63):
        raise TracekitError(f"{option} {text!r} is not an RFC 3339 time within 1677-2262 "
                            f"(e.g. 2026-08-18T10:00:00Z or 2026-08-18T18:00:00.5+08:00)")
    return ns
