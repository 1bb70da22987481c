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
"""

import os


class Store:
    """One tracekit store (a DuckDB file); a context manager that closes it."""

    def __init__(self, path=None, read_only=False):
        from .store.db import connect
        self.con = connect(path, read_only=read_only)

    def ingest(self, files, labels=None, replace=False, clock_offset_ns=None, log_format=None,
               time_ns=None):
        """Ingest captures and event logs (told apart by their first bytes) in one
        transaction: all of them, or none. `time_ns` dates the files that carry no
        time of their own (bench reports, harness TSV, bare /metrics scrapes).
        Returns (capture summaries, log summaries)."""
        from .capture.formats import split_inputs
        from .events import read_logs
        from .store.events import load_logs
        from .store.ingest import command, load_captures
        captures, logs = split_inputs(files)
        parsed = read_logs(logs, log_format, time_ns)  # before anything is written
        with command(self.con) as c:
            caps = (load_captures(self.con, captures, labels=labels, replace=replace, command=c)
                    if captures else [])
            logged = (load_logs(self.con, parsed, labels, clock_offset_ns, replace, command=c)
                      if parsed else [])
        return caps, logged

    def analyze(self, progress=None):
        """Bring every derived table up to date; a StepResult per step."""
        from .analyze import analyze
        return analyze(self.con, progress)

    def sql(self, query, params=None):
        """A DuckDB relation of any query over the store's tables and views."""
        return self.con.sql(query, params=params)

    def table(self, name):
        """A DuckDB relation of one table or view (docs/tables.md lists them)."""
        return self.con.table(name)

    def ablation(self, compare, by=(), levels=None, where=None, predict=False):
        """The table `tracekit ablation` prints, as a pandas DataFrame (times in ms);
        `predict` adds the counterfactual columns (`--predict`)."""
        import pandas as pd

        from .ablation import ablation, predict as predicted
        from .report.table import ablation_rows
        results = ablation(self.con, compare, by=tuple(by), levels=levels, where=where)
        if predict:
            for c in results:
                c.prediction = predicted(c, compare)
        columns, rows = ablation_rows(results, tuple(by), predictions=predict)
        return pd.DataFrame(rows, columns=columns)

    def view(self, name, **params):
        """A CLI view as a pandas DataFrame: attribute, handshakes, retransmissions,
        rounds, stalls, acks, rtt, requests, playback, underruns, serving. Filters as
        the CLI's: capture_id, flow_id (transport views) or run (application views)."""
        import pandas as pd

        from .runner import run_analysis
        transport = {"handshakes", "rtt", "retransmissions", "rounds", "stalls", "acks",
                     "requests"}
        defaults = ({"capture_id": None, "flow_id": None} if name in transport else {"run": None})
        columns, rows = run_analysis(self.con, f"views/{name}", **{**defaults, **params})
        return pd.DataFrame(rows, columns=columns)

    def close(self):
        self.con.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def open(path=None, read_only=False):  # noqa: A001 - tracekit.open, like sqlite3.connect
    """Open (creating if needed) the store at `path` (default: $TRACEKIT_DB or
    ./tracekit.duckdb); `read_only` for a store you must not change."""
    return Store(os.fspath(path) if path is not None else None, read_only)


def open_dataset(directory):
    """A read-only DuckDB connection whose views are the tables of a Parquet
    dataset (`tracekit export --parquet DIR`): `.sql(...)` as on a store."""
    from .store.db import open_dataset as dataset
    return dataset(str(directory))
