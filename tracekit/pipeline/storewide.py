"""The store-wide steps of one analyze, put in place together.

Each store-wide table (requests, bounds, request_phases, attribution...) is
built under `store.<table>__building`, its rows committed as they come (one
transaction would hold them all in memory until it commits); the steps after
it read it through a temporary view of its name (a connection reads its
temporary schema first). When every store step has run, one transaction
puts them in place and records the builds in `analysis_runs`: readers see
each as a view `main.<table>` of `store.<table>`, and the commit renames
`store.<table>__building` to `store.<table>` (the old one dropped) -- no row
is copied.
So a killed analyze never shows requests of one run beside bounds of
another, and no half-built table is visible: what is left under `store.` is
dropped by the next analyze (`discard_leftovers`).

A step that fails leaves its table empty with its columns (never stale,
never missing), records the reason (no version: the next analyze tries it
again), and the steps after it run over the empty table.
"""

import contextlib
import hashlib
import time

import duckdb

from ..core.errors import TracekitError
from ..store.schema import TABLES, create_table_sql
from .runner import analysis_sql
from .stepkinds import FINAL_ORDER, PartitionedStoreStep, StepResult, exists

SUFFIX = "__building"


def inputs_fingerprint(con, store_failures=None):
    """A digest of what the store-wide tables are built from: the captures and
    logs (and when they last changed), the captures analyses failed on, and
    which store steps before this one failed in this run (`store_failures`,
    {analysis: failed?}): a step that succeeds again rebuilds those after it."""
    rows = con.execute("""
        SELECT 'c', capture_id, ingested_at::VARCHAR FROM captures
        UNION ALL SELECT 'l', log_id, updated_at::VARCHAR FROM event_logs
        UNION ALL SELECT 'f', capture_id, analysis FROM analysis_runs WHERE error IS NOT NULL
        """).fetchall()
    # the store steps' own failures: those of the steps before, in this run
    rows = [r for r in rows if not (r[0] == "f" and r[1] == 0)]
    rows += [("f", 0, a) for a, failed in (store_failures or {}).items() if failed]
    return hashlib.sha256(repr(sorted(rows)).encode()).hexdigest()[:16]


def discard_leftovers(con):
    """Drop the tables a killed analyze left under `store.` (never visible)."""
    for (name,) in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'store' "
            "AND table_name LIKE ?", [f"%{SUFFIX}"]).fetchall():
        con.execute(f'DROP TABLE IF EXISTS store."{name}"')


def _put_in_place(con, table):
    """`main.<table>`, a view of `store.<table>`, now shows this run's build: the
    build is renamed (DuckDB moves no table across schemas, and a copy would
    write every row again), the old rows dropped; within the caller's
    transaction. (A table of an older version or an import under `main.` is
    dropped.)"""
    kind = con.execute("SELECT table_type FROM information_schema.tables "
                       "WHERE table_schema = 'main' AND table_name = ?", [table]).fetchall()
    if kind and kind[0][0] == "BASE TABLE":
        con.execute(f"DROP TABLE main.{table}")
    con.execute(f"DROP TABLE IF EXISTS store.{table}")
    con.execute(f"ALTER TABLE store.{table}{SUFFIX} RENAME TO {table}")
    con.execute(f"CREATE OR REPLACE VIEW main.{table} AS SELECT * FROM store.{table}")


class StoreWide:
    """The store steps of one analyze: `build` each in DAG order, then `commit`
    (or `discard`, in a `finally`)."""

    def __init__(self, con):
        self.con = con
        self.done = []  # (step, stamp or None, rows, seconds, error)
        self.failures = {}  # analysis -> failed in this run
        self._shadowed = set()  # tables whose temporary view this run made

    def _stamp(self, step):
        fingerprint = inputs_fingerprint(self.con, self.failures)
        return hashlib.sha256((step.dag_version + fingerprint).encode()).hexdigest()[:16]

    def build(self, step, progress, storage_failed, reason):
        """Build `step` under its building name unless it is current; a StepResult."""
        con = self.con
        stamped = self._stamp(step)
        result = StepResult(step.table, scope="store")
        current = con.execute(
            "SELECT count(*) FROM analysis_runs WHERE analysis = ? AND version = ?",
            [step.table, stamped]).fetchall()[0][0]
        if current and exists(con, step.table):
            return result
        if progress:
            progress(step.table, 0)
        t0 = time.perf_counter()
        building = f"store.{step.table}{SUFFIX}"
        con.execute("CREATE SCHEMA IF NOT EXISTS store")
        con.execute(f"DROP TABLE IF EXISTS {building}")
        try:
            if isinstance(step, PartitionedStoreStep):  # (it shadows those names itself)
                n, error = step.write_all(con, building, self.sources()), None
            else:
                n, error = step.write_all(con, building), None
        except (duckdb.Error, TracekitError, ArithmeticError, ValueError) as e:
            if storage_failed(e):
                raise
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")  # (a part of it was being written)
            n, error = 0, reason(e)
            result.failures.append((0, error))
            self._empty(step)
        self.failures[step.table] = error is not None
        seconds = time.perf_counter() - t0
        self.done.append((step, None if error else stamped, n, seconds, error))
        self._shadow()
        if error is None:
            result.built, result.rows = 1, n
        result.seconds = seconds
        return result

    def _empty(self, step):
        """The failed step's tables, empty with their columns."""
        for table in step.tables:
            target = f"store.{table}{SUFFIX}"
            self.con.execute(f"DROP TABLE IF EXISTS {target}")
            if table in TABLES:
                self.con.execute(create_table_sql(table).replace(
                    f"CREATE TABLE IF NOT EXISTS {table}", f"CREATE TABLE {target}", 1))
                continue
            sql = FINAL_ORDER.sub("SELECT * FROM final\n", analysis_sql(table))
            try:
                self.con.execute(f"CREATE TABLE {target} AS SELECT * FROM ({sql}) LIMIT 0")
            except duckdb.Error:  # its columns cannot be known: the old table's
                if exists(self.con, table):
                    self.con.execute(f"CREATE TABLE {target} AS SELECT * FROM main.{table} "
                                     f"LIMIT 0")

    def _built_tables(self):
        # (one look at the catalog, not one per table: this runs after every step)
        building = {r[0] for r in self.con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = 'store' AND ends_with(table_name, ?)", [SUFFIX]).fetchall()}
        for step, *_ in self.done:
            for table in step.tables:
                if f"{table}{SUFFIX}" in building:
                    yield table

    def sources(self):
        """{table: where its rows are now} for the tables this run built: what
        the temporary views of their names show (a step that shadows those names
        itself is told so, not left to read a view's query back)."""
        return {table: f"store.{table}{SUFFIX}" for table in self._built_tables()}

    def _shadow(self):
        """The steps after read what this run built (temporary views of its names;
        made once a table)."""
        for table, source in self.sources().items():
            if table not in self._shadowed:
                self.con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM {source}")
                self._shadowed.add(table)

    def commit(self):
        """Every table built put in place (renamed, not copied), and its record,
        in one transaction."""
        if not self.done:
            return
        con = self.con
        tables = list(self._built_tables())
        for table in tables:
            con.execute(f"DROP VIEW IF EXISTS temp.{table}")
        con.execute("BEGIN")
        try:
            for table in tables:
                _put_in_place(con, table)
            for step, stamped, n, seconds, error in self.done:
                con.execute("DELETE FROM analysis_runs WHERE analysis = ?", [step.table])
                con.execute("INSERT INTO analysis_runs VALUES (?, 0, ?, ?, ?, now(), ?)",
                            [step.table, stamped or "failed", n, seconds, error])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def discard(self):
        """The temporary views and the building tables (after `commit`, or a failure)."""
        for step, *_ in self.done:
            for table in step.tables:
                with contextlib.suppress(duckdb.Error):
                    self.con.execute(f"DROP VIEW IF EXISTS temp.{table}")
        with contextlib.suppress(duckdb.Error):
            discard_leftovers(self.con)
