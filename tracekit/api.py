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

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from .core.errors import TracekitError
from .readers.formats import INPUT_FORMATS  # noqa: F401 (what --format accepts)

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from .presentation.ablation import Comparison

Rows = tuple[list[str], list[tuple[Any, ...]]]


class Store:
    """One tracekit store (a DuckDB file); a context manager that closes it."""

    def __init__(self, path: str | os.PathLike[str] | None = None,
                 read_only: bool | str = False) -> None:
        from .pipeline.stores import open_store
        from .store.db import default_db_path
        self.path: str = str(path or default_db_path())
        self.con: duckdb.DuckDBPyConnection = open_store(self.path, read_only=read_only)

    def ingest(self, files: Sequence[str | os.PathLike[str]],
               labels: Mapping[str, str] | None = None, replace: bool = False,
               clock_offset_ns: int | None = None, log_format: str | None = None,
               time_ns: int | None = None) -> tuple[list[Any], list[Any]]:
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

    def analyze(self, progress: Callable[..., object] | None = None,
                params: Mapping[str, object] | None = None) -> list[Any]:
        """Bring every derived table up to date; a StepResult per step."""
        from .pipeline.analyze import analyze
        results: list[Any] = analyze(self.con, progress, params)
        return results

    def sql(self, query: str, params: object = None) -> duckdb.DuckDBPyRelation:
        """A DuckDB relation of any query over the store's tables and views."""
        return self.con.sql(query, params=params)

    def table(self, name: str) -> duckdb.DuckDBPyRelation:
        """A DuckDB relation of one table or view (docs/tables.md lists them)."""
        return self.con.table(name)

    def rows(self, name: str, **params: object) -> Rows:
        """(columns, rows) of analyses/<name>.sql with its parameters: what a
        view of the CLI prints, before formatting."""
        from .pipeline.runner import run_analysis
        out: Rows = run_analysis(self.con, name, **params)
        return out

    def query(self, text: str) -> Rows | None:
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

    def view(self, name: str, **params: object) -> pd.DataFrame:
        """A CLI view as a pandas DataFrame: attribute, handshakes, retransmissions,
        rounds, stalls, acks, rtt, requests, playback, underruns, serving. Filters as
        the CLI's: capture_id, flow_id (transport views) or run (application views)."""
        import pandas as pd

        from .presentation.views import BY_NAME
        if name not in BY_NAME:
            raise TracekitError(f"no view named {name!r}; known: {', '.join(BY_NAME)}")
        columns, rows = self.rows(f"views/{name}", **{**BY_NAME[name].defaults(), **params})
        return pd.DataFrame(rows, columns=columns)

    def comparisons(self, compare: str, by: Sequence[str] = (),
                    levels: Sequence[str] | None = None, where: Mapping[str, str] | None = None,
                    predict: Sequence[str] | None = None) -> list[Comparison]:
        """The ablation's Comparison objects (presentation.ablation); `predict`:
        None for none, () for the what-if replay (or, for a factor it does not
        know, the factor's default spans), or span names."""
        from .presentation.ablation import ablation, replayed
        from .presentation.ablation import predict as predicted
        if isinstance(by, str):  # one factor named alone, not its letters
            by = (by,)
        self.require_analyzed(needs=("request_attributes",))
        results: list[Comparison] = ablation(self.con, compare, by=tuple(by), levels=levels,
                                             where=where)
        if predict is not None:
            for c in results:
                c.prediction = (None if predict else
                                replayed(self.con, c, compare, tuple(by), where))
                if c.prediction is None:
                    c.prediction = predicted(c, compare, tuple(predict) or None)
        return results

    def stream_ablation(self, by: Sequence[str] = ("protocol", "scheduling"),
                        where: Mapping[str, str] | None = None, media: bool = True) -> list[Any]:
        """The stream-level ablation's cells (presentation.stream_ablation.Cell):
        per combination of the `by` labels, the media streams' (or, without
        `media`, every stream's) medians with intervals and the model's values."""
        from .presentation.stream_ablation import stream_ablation
        if isinstance(by, str):
            by = (by,)
        cells: list[Any] = stream_ablation(self.con, tuple(by), where, media)
        return cells

    def ablation(self, compare: str, by: Sequence[str] = (), levels: Sequence[str] | None = None,
                 where: Mapping[str, str] | None = None, predict: bool = False) -> pd.DataFrame:
        """The table `tracekit ablation` prints, as a pandas DataFrame (times in ms);
        `predict` adds the counterfactual columns (`--predict`)."""
        import pandas as pd

        from .presentation.table import ablation_rows
        by = (by,) if isinstance(by, str) else tuple(by)  # one factor named alone
        results = self.comparisons(compare, by, levels, where, () if predict else None)
        columns, rows = ablation_rows(results, tuple(by), predictions=predict)
        return pd.DataFrame(rows, columns=columns)

    def deadline(self, rounds: int, deadline_s: float, run: str | None = None, block: int = 5,
                 samples: int = 4000, seed: int = 0, upload_bits: float | None = None,
                 disconnect: tuple[int, float] | None = None) -> pd.DataFrame:
        """What `tracekit deadline` prints, as a pandas DataFrame: P(T <= D) for a
        task of `rounds` rounds from the measured agent rounds resampled in blocks
        of `block` neighbouring rounds (and drawn independently, for contrast),
        the share of measured tasks that met D, the uplink D needs; with
        `disconnect` = (after round k, reconnect s) the task time after it with
        and without committed progress."""
        import pandas as pd

        from .presentation.agents import deadline
        columns, rows = deadline(self.con, rounds, deadline_s, run, block, samples, seed,
                                 upload_bits, disconnect)
        return pd.DataFrame(rows, columns=columns)

    def placement(self, tiers: Sequence[tuple[str, Mapping[str, float]]], rounds: int,
                  deadline_s: float, run: str | None = None, block: int = 5, samples: int = 4000,
                  seed: int = 0) -> pd.DataFrame:
        """What `tracekit placement` prints: the measured rounds moved to each tier
        of `tiers` [(name, {edge_s, model_s, rtt_s, setup_s, upload_s | upload_bits +
        uplink_bps, power_w})], predicted task time, P(T <= D), energy."""
        import pandas as pd

        from .presentation.agents import placement
        columns, rows = placement(self.con, tiers, rounds, deadline_s, run, block, samples, seed)
        return pd.DataFrame(rows, columns=columns)

    def report(self, out: str | os.PathLike[str] | None = None, run: str | None = None,
               experiment: str | None = None, where: Mapping[str, str] | None = None,
               compare: str | None = None, by: Sequence[str] = (),
               levels: Sequence[str] | None = None) -> str:
        """The HTML report `tracekit report` writes, as a string (also written to
        `out` when given): the answer first, then the drill-down, limited to
        the requests `run`, `experiment` and `where` ({label: value}) select;
        `compare`/`by`/`levels` choose the ablation (else each experiment's
        design factors)."""
        from .presentation.html import build
        self.require_analyzed(needs=("request_attributes",))  # (build checks attribution)
        page: str = build(self.con, run=run, experiment=experiment, compare=compare,
                          by=(by,) if isinstance(by, str) else tuple(by),
                          levels=list(levels) if levels else None, where=dict(where or {}))
        if out is not None:
            with builtins.open(out, "w", encoding="utf-8") as f:
                f.write(page)
        return page

    def plot(self, kind: str, out: str | os.PathLike[str], **options: Any) -> tuple[str, str]:
        """Draw the chart `tracekit plot KIND` draws into OUT.html and OUT.png and
        return their paths. Options by kind: capture_id, flow_id, direction,
        t_from, t_to (time-sequence, inflight, rtt); stream (buffer, chunks);
        run (serving); request_key (waterfall); compare, by, levels, where
        (ablation, attribution)."""
        from .presentation import plots
        chart, _ = plots.draw(self.con, kind, **options)
        paths: tuple[str, str] = plots.save(chart, os.fspath(out))
        return paths

    def whatif(self, set: Mapping[str, object],  # noqa: A002 - the change, as in --set
               where: Mapping[str, str] | None = None, source: Mapping[str, object] | None = None,
               by: Sequence[str] = (), draws: int | None = None,
               assume: Mapping[str, object] | None = None,
               seed: int | None = None) -> list[Any]:
        """What-if (docs/whatif.md): the requests matching `where` and `source`
        ({factor: level}, the group measured) replayed under `set` ({factor:
        level}, the change); one (group, WhatIf) per combination of the `by`
        attributes (a label, a field of the request's events or a column, as
        `where` names them: request_attributes.sql). Factors:
        tracekit.whatif.factors. Values may be strings. `seed`: the replays'
        draws (another seed shows what a prediction owes to them); None: fixed."""
        from .presentation.whatif import run
        from .whatif.replayer import DRAWS
        self.require_analyzed(needs=("request_attributes",))
        groups: list[Any] = run(self.con, dict(where or {}), _levels(source, "--from"),
                                _levels(set), tuple(by), draws or DRAWS,
                                _levels(assume, "--assume"), seed)
        return groups

    def interactions(self, source: Mapping[str, str], target: Mapping[str, str],
                     where: Mapping[str, str] | None = None) -> Any:
        """Shapley split of median(source) - median(target) over the factors that
        differ ({label: level} each: any labels, not only the what-if's factors),
        with bootstrap intervals and the pairs' interaction terms
        (tracekit.whatif.shapley.Split)."""
        from .whatif.shapley import split
        self.require_analyzed(needs=("request_attributes",))
        return split(self.con, dict(where or {}), dict(source), dict(target))

    def require_analyzed(self, needs: Sequence[str] = ()) -> None:
        """Raise unless `tracekit analyze` has built the derived tables, and the
        relations `needs` names (newer than some stores an older tracekit
        analysed: request_attributes)."""
        have = {r[0] for r in self.con.execute(
            "SELECT table_name FROM information_schema.tables").fetchall()}
        if "handshakes" not in have:
            raise TracekitError(f"{self.path} has not been analysed yet; run: tracekit analyze "
                                f"--db {self.path}")
        missing = sorted(n for n in needs if n not in have)
        from .pipeline.analyze import stale_views
        older = [] if missing else stale_views(self.con, needs)
        if missing or older:
            raise TracekitError(f"{self.path} was analysed by an older tracekit (it has "
                                + (f"no {', '.join(missing)}" if missing else
                                   f"an older {', '.join(older)}")
                                + f"); run: tracekit analyze --db {self.path}")

    def check(self, capture_id: int | None = None, flow_id: int | None = None,
              run: str | None = None, log_id: int | None = None, where: str | None = None) -> None:
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

    def capture_ids(self) -> list[int]:
        """The ids of the ingested captures, in order."""
        return [r[0] for r in self.con.execute(
            "SELECT capture_id FROM captures ORDER BY 1").fetchall()]

    def estimate_clock(self, log_id: int, capture_id: int | None) -> Any:
        """A ClockEstimate of event log `log_id`'s offset against a capture's clock."""
        from .presentation.clock import estimate_offset
        self.check(log_id=log_id)
        return estimate_offset(self.con, log_id, capture_id)

    def apply_clock(self, log_id: int, estimate: Any) -> None:
        """Move the log's events by a ClockEstimate (the analyses rebuild next time)."""
        from .pipeline.logs import set_clock_offset
        set_clock_offset(self.con, log_id, estimate.offset_ns, "estimated", estimate.uncertainty_ns)

    def tls_keys(self, capture_id: int, keylog: str | os.PathLike[str]) -> int:
        """Decrypt a capture's TLS with a key log (tshark); rebuild its handshakes.
        Returns the number of decrypted messages."""
        from .pipeline.analyze import analyze
        from .pipeline.steps.keylog import load_keys
        n: int = load_keys(self.con, capture_id, keylog)
        analyze(self.con)
        return n

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False


def _levels(levels: Mapping[str, object] | None, option: str = "--set") -> dict[str, Any]:
    """{factor: value} checked against the vocabulary (strings or values)."""
    from .whatif.factors import ALIASES, value
    return {ALIASES.get(k, k): value(ALIASES.get(k, k), str(v), option)
            for k, v in (levels or {}).items()}


def open(path: str | os.PathLike[str] | None = None,  # noqa: A001 - like sqlite3.connect
         read_only: bool | str = False) -> Store:
    """Open (creating if needed) the store at `path` (default: $TRACEKIT_DB or
    ./tracekit.duckdb); `read_only` for a store you must not change
    ("auto": read-only when the file cannot be written)."""
    return Store(os.fspath(path) if path is not None else None, read_only)


def open_dataset(directory: str | os.PathLike[str]) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB connection whose views are the tables of a Parquet
    dataset (`tracekit export --parquet DIR`): `.sql(...)` as on a store."""
    from .pipeline.stores import open_dataset as dataset
    con: duckdb.DuckDBPyConnection = dataset(str(directory))
    return con


def damaged_dataset_file(path: str | os.PathLike[str] | None) -> str | None:
    """When `path` is a Parquet dataset, one line naming its first file DuckDB
    cannot read whole (for a command over it that failed), else None."""
    from .store.dataset import is_dataset, unreadable
    if path is None or not is_dataset(os.fspath(path)):
        return None
    said: str | None = unreadable(os.path.abspath(os.fspath(path)))
    return said


def ingest(db: str | os.PathLike[str] | None = None,
           files: Sequence[str | os.PathLike[str]] = (),
           manifests: Sequence[str | os.PathLike[str]] = (),
           labels: Mapping[str, str] | None = None, replace: bool = False,
           input_format: str = "auto", clock_offset_ns: int | None = None,
           time_ns: int | None = None, progress: Callable[..., object] | None = None,
           workers: int | None = None, cluster: str | None = None,
           dataset_progress: Callable[..., object] | None = None) -> Any:
    """Ingest files and manifests' runs into the store or dataset `db`
    (pipeline.ingest.ingest); returns an Ingested."""
    from .store.dataset import is_dataset
    from .store.db import default_db_path
    from .store.opening import Opening
    path = str(db or default_db_path())
    # a store opens on a thread while the pipeline's modules are imported
    opening = (Opening(path) if (files or manifests) and not (workers or cluster)
               and not is_dataset(path) else None)
    from .pipeline.ingest import ingest as run
    return run(db, files, manifests, labels, replace, input_format, clock_offset_ns, time_ns,
               progress, workers, cluster, dataset_progress, opening)


def on_dataset(db: str | os.PathLike[str] | None, workers: int | None = None,
               cluster: str | None = None) -> bool:
    """Whether `db` is a Parquet dataset (analysed on Dask)."""
    from .store.db import default_db_path, on_dask
    return bool(on_dask(str(db or default_db_path()), workers, cluster))


def analyze(db: str | os.PathLike[str] | None = None,
            params: Mapping[str, object] | None = None,
            progress: Callable[..., object] | None = None, workers: int | None = None,
            cluster: str | None = None,
            dataset_progress: Callable[..., object] | None = None) -> Any:
    """Bring every derived table of `db` up to date: a StepResult per step for
    a store; for a dataset (on Dask) a (DatasetRun, where) pair."""
    if on_dataset(db, workers, cluster):
        from .pipeline import cluster as engine
        with engine.client_for(workers, cluster) as (client, where):
            run = engine.analyze(db, client, params, progress=dataset_progress)
        return run, where
    with open(db) as store:
        return store.analyze(progress, params)


def export(db: str | os.PathLike[str], directory: str | os.PathLike[str]) -> dict[str, int]:
    """Write the store as a Parquet dataset in a new folder; {table: rows}."""
    from .pipeline.analyze import store_wide_tables
    from .store.dataset import export as write
    with open(db, read_only=True) as store:
        written: dict[str, int] = write(store.con, directory, whole=store_wide_tables())
    return written


def import_dataset(directory: str | os.PathLike[str],
                   db: str | os.PathLike[str]) -> dict[str, int]:
    """Fill a new store from a Parquet dataset; {table: rows}."""
    from .store.dataset import import_into
    with open(db) as store:
        read: dict[str, int] = import_into(store.con, directory)
    return read


def check_dataset(directory: str | os.PathLike[str]) -> list[tuple[str, str, str]]:
    """Every file tracekit reads of a Parquet dataset and every file its records
    list, with its state -- "ok", "damaged", "missing" or "not checksummed" (a
    dataset written before checksums) -- and what was found: [(path, state, detail)]."""
    from .store import checksum, dataset
    path = os.path.abspath(os.fspath(directory))
    if not os.path.isdir(path):
        raise TracekitError(f"{directory}: not a folder (check reads a Parquet dataset)")
    dataset.refuse_first_layout(path)
    read = [f for name, entry in dataset.read_manifest(path).items()
            for f in dataset.files(path, name, entry["partitioned"])]
    found: list[tuple[str, str, str]] = checksum.scrub(path, read)
    return found


def lab_plan(experiment: str | os.PathLike[str]) -> tuple[Any, list[tuple[Any, ...]]]:
    """(spec, [(trial, order, factor levels, settings)]) of an experiment file."""
    from .lab import experiment as ex
    spec = ex.load(experiment)
    return spec, [(trial, order, combo, ex.settings_of(spec, combo))
                  for trial, order, combo in ex.schedule(spec)]


def lab_run(experiment: str | os.PathLike[str], workdir: str | os.PathLike[str],
            db: str | os.PathLike[str], progress: Callable[..., object] | None = None,
            resume: bool = False,
            on_runs_done: Callable[[Any], object] | None = None) -> tuple[Any, Any, Any]:
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


def whatif_emulate(results: Sequence[tuple[Any, Any]], workdir: str | os.PathLike[str],
                   trials: int = 4, requests: int = 4,
                   progress: Callable[..., object] | None = None) -> list[tuple[Any, Any]]:
    """Re-run each what-if group's calibrated path and workload in the lab (root),
    as measured and with the change (tracekit.whatif.emulate); [(group, Emulation)]
    beside `results` ([(group, WhatIf)], as Store.whatif returns). Each group's
    runs and their store go in a folder of `workdir` of their own."""
    from .whatif import emulate
    return [(g, emulate.run(r, os.path.join(os.fspath(workdir), f"group-{i}"), trials, requests,
                            progress)) for i, (g, r) in enumerate(results, 1)]


def lab_clean(force: bool = False) -> list[str]:
    """Remove what crashed lab runs left; the lines saying what was done."""
    from .lab import cleanup
    return list(cleanup.clean(force))


def parse_time(text: str, option: str = "--time") -> int:
    """An RFC 3339 time -> int ns since the epoch (TracekitError if it is not one
    within 1677-2262, what int64 nanoseconds hold)."""
    from .readers.events.logfmt import rfc3339_ns
    ns: int | None = rfc3339_ns(text)
    if ns is None or not -(1 << 63) < ns < (1 << 63):
        raise TracekitError(f"{option} {text!r} is not an RFC 3339 time within 1677-2262 "
                            f"(e.g. 2026-08-18T10:00:00Z or 2026-08-18T18:00:00.5+08:00)")
    return ns


def h2_events(capture: str | os.PathLike[str], port: int, out: str | os.PathLike[str],
              vantage: str = "client", connection: str | None = None, run: str | None = None,
              keylog: str | os.PathLike[str] | None = None, notes: list[str] | None = None) -> int:
    """HTTP/2 frames of a capture (cleartext, or TLS 1.3 decrypted with `keylog`)
    placed in the connection's byte stream, written to `out` as tracekit's
    stream events (JSON Lines, for `ingest`; the `streams` table reads them).
    Returns how many events; what could not be read is appended to `notes`."""
    from .pipeline.h2events import write_h2_events
    n: int = write_h2_events(capture, port, out, vantage, connection, run, keylog, notes)
    return n
