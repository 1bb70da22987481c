"""The kinds of analyze step: how each builds, versions and stores its tables.

- CodeStep: a module of tracekit.pipeline.steps run per capture
  (`module.build(con, writer, capture_id, **params)`), in many short
  transactions for a large capture (a marker row hides it meanwhile);
- SqlStep: analyses/<table>.sql over a batch of consecutive captures;
- ViewStep: a view, nothing stored;
- StoreStep: a table built from the whole store at once; PartitionedStoreStep
  the same in parts of requests, CodeStoreStep by a module's `build_all`.

tracekit.pipeline.dag says which kind each step is and in what order they run.
"""

import hashlib
import inspect
import json
import re
import time
from dataclasses import dataclass, field

import duckdb

from ..core.errors import QueryError
from ..core.model import sql_macros
from ..store.db import in_transaction
from ..store.recovery import discard_analysis
from ..store.schema import create_table_sql, storage
from .runner import analysis_sql


def sql_version(name):
    """A SQL step's own version: its text and the macros of the formulas it may
    call (tracekit.core.model.SQL_MACROS)."""
    text = analysis_sql(name) + "\n".join(sql_macros())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


FINAL_ORDER = re.compile(r"SELECT \* FROM final ORDER BY[^\n]*\s*$")
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

        A small capture is built in one transaction (`build_small`). A large
        one is written in many short transactions (one big one keeps every
        row in memory until it commits): a row in `analyses_in_progress`
        hides it from the tables' views meanwhile, and the last transaction
        removes that row as it records the build. Either way a failure
        leaves no row of the capture behind.
        """
        (packets,), = con.execute("SELECT packets FROM captures WHERE capture_id = ?",
                                  [capture_id]).fetchall()
        if packets <= ONE_TRANSACTION_PACKETS:  # then one transaction is cheaper
            try:
                return self.build_small(con, writer, [capture_id], version)[capture_id]
            except BaseException:
                self._discard(writer, capture_id)
                raise
        self._discard(writer, capture_id)  # rows an earlier build left
        writer.execute("INSERT INTO analyses_in_progress VALUES (?, ?, now())",
                       [self.table, capture_id])
        t0 = time.perf_counter()
        try:
            out = self.module.build(con, writer, capture_id, **self.params)
            writer.execute("BEGIN")
            writer.execute("DELETE FROM analyses_in_progress WHERE analysis = ? AND capture_id = ?",
                           [self.table, capture_id])
            writer.execute("INSERT INTO analysis_runs VALUES (?, ?, ?, ?, ?, now(), NULL)",
                           [self.table, capture_id, version, out[self.table],
                            time.perf_counter() - t0])
            writer.execute("COMMIT")
        except BaseException:
            if in_transaction(writer):
                writer.execute("ROLLBACK")
            self._discard(writer, capture_id)
            raise
        return out[self.table]

    def _discard(self, writer, capture_id):
        """Delete the capture's rows of every table of the step."""
        for table in self.tables:
            writer.execute(f"DELETE FROM {storage(table)} WHERE capture_id = ?", [capture_id])
        discard_analysis(writer, self.table, capture_id)

    def build_small(self, con, writer, batch, version, report=None):
        """Build captures each small enough for one transaction, all in one
        ({capture: rows}): a transaction per capture cost ~15 ms, more than
        a small capture's pass. A failure rolls them all back (the caller
        then builds them one by one, to keep the others)."""
        writer.execute("BEGIN")
        try:
            out, runs = {}, []
            for capture_id in batch:
                if report:
                    report(capture_id)
                t0 = time.perf_counter()
                for table in self.tables:  # rows an earlier build left
                    writer.execute(f"DELETE FROM {storage(table)} WHERE capture_id = ?",
                                   [capture_id])
                out[capture_id] = self.module.build(con, writer, capture_id,
                                                    **self.params)[self.table]
                runs.append([self.table, capture_id, version, out[capture_id],
                             time.perf_counter() - t0])
            writer.executemany("INSERT INTO analysis_runs VALUES (?, ?, ?, ?, ?, now(), NULL)",
                               runs)
            writer.execute("COMMIT")
        except BaseException:
            if in_transaction(writer):
                writer.execute("ROLLBACK")
            raise
        return out


class SqlStep:
    """A table built by analyses/<table>.sql over a range of captures."""

    scope = "capture"

    def __init__(self, table):
        self.table = table
        self.tables = (table,)

    def version(self):
        return sql_version(self.table)

    def _sql(self):
        # a table has no order: skip the final ORDER BY the file keeps for reading
        return FINAL_ORDER.sub("SELECT * FROM final\n", analysis_sql(self.table))

    def create(self, con):
        if not exists(con, self.table):
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
    """A view (analyses/<name>.sql): over per-capture tables, or over the
    store-wide `requests` and `events` (request_attributes); nothing is stored."""

    scope = "view"

    def __init__(self, name, reads=()):
        self.table = name
        self.tables = (name,)
        self.reads = tuple(reads)

    def ready(self, con):
        """Every relation it reads is there: not so for a view over the
        store-wide `requests` in a capture's task of a dataset, which builds
        no store-wide table (tracekit/pipeline/cluster/)."""
        return all(exists(con, t) for t in self.reads)

    def version(self):
        return sql_version(self.table)

    def create(self, con):
        sql = FINAL_ORDER.sub("SELECT * FROM final\n", analysis_sql(self.table))
        if exists(con, self.table, "BASE TABLE"):  # a table of an older version
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
    """A store step over the requests, run in parts of about PART_REQUESTS
    requests (attribution), so that its memory is bounded by a part whatever
    the store holds. Each part shadows `requests`, `bounds` and
    `request_phases` with temporary views of its own rows (DuckDB reads the
    temporary schema first): the requests whose `request_key` falls in the
    part's range (cut at keys of a sample, _part_views). A range is a filter
    DuckDB evaluates inside the scan, on the key column alone, so a part
    reads little more than its own rows whatever the store holds. (It used to
    be a hash of the key, which the scan cannot evaluate: with few parts each
    part read the tables whole, with more the tables were first copied
    bucketed and sorted -- at 29 M packets, 4.8 M requests in 20 parts, the
    copies took 12.0 s of the step's 31 s and the step 25x its time at
    2.9 M.) The SQL is the same for one part or many: it reads whatever
    those names hold.

    A part of 161 k requests of the mixed capture peaks at 157 MB of DuckDB's
    buffers, one of 241 k at 213 MB, neither spilling (before the parts' rows
    were estimated: 244 MB and 7 MB of temporary files for 161 k):
    PART_REQUESTS keeps a part under analyze's limit of 256 MB. Two parts of
    the mixed capture's 482 k requests cost 2.06-2.07 CPU s, three
    2.18-2.20."""

    PART_REQUESTS = 250_000
    SAMPLE = 16  # the cuts are taken from the keys whose hash is 0 modulo this
    PART_TABLES = ("requests", "bounds", "request_phases")

    def write_all(self, con, target, sources=None):
        """Build `target`; `sources` ({table: relation}) says where each of
        PART_TABLES' rows are now when not in the store's table of that name
        (an analyze passes the tables it is building: storewide.py)."""
        sources = {t: (sources or {}).get(t) or _stored(con, t) for t in self.PART_TABLES}
        sql = FINAL_ORDER.sub("SELECT * FROM final\n", analysis_sql(self.table))
        (n,), = con.execute(f"SELECT count(*) FROM {sources['requests']}").fetchall()
        parts = max(1, -(-n // self.PART_REQUESTS))
        try:
            if parts == 1:
                con.execute(f"CREATE OR REPLACE TABLE {target} AS SELECT * FROM (\n{sql}\n)")
            else:
                part_view = self._part_views(con, parts, sources)
                for part in range(parts):
                    for t in self.PART_TABLES:
                        con.execute(f"CREATE OR REPLACE TEMP VIEW {t} AS {part_view(t, part)}")
                    head = (f"CREATE OR REPLACE TABLE {target} AS" if part == 0
                            else f"INSERT INTO {target}")
                    con.execute(f"{head} SELECT * FROM (\n{sql}\n)")
        except duckdb.Error as e:
            raise QueryError(f"analyses/{self.table}.sql failed: {str(e).splitlines()[0]}") from None
        finally:
            if parts > 1:
                for t in self.PART_TABLES:  # (the caller's views of these names come back)
                    con.execute(f"DROP VIEW IF EXISTS temp.{t}")
                    if sources[t] != _stored(con, t):
                        con.execute(f"CREATE OR REPLACE TEMP VIEW {t} AS "
                                    f"SELECT * FROM {sources[t]}")
        return con.execute(f"SELECT count(*) FROM {target}").fetchall()[0][0]

    def _part_views(self, con, parts, sources):
        """The query of a part's rows of a table (`part_view(table, part)`): the
        rows whose request_key is in the part's range. The `parts - 1` cuts
        are keys of a sample of the requests (those whose hash is 0 modulo
        SAMPLE: the same sample every run), evenly spaced in key order, so the
        parts hold about as many requests each. A request without a key goes
        with the first part."""
        def sorted_keys(sample=""):
            return [k for k, in con.execute(
                f"SELECT request_key FROM {sources['requests']} WHERE request_key IS NOT NULL "
                f"{sample} ORDER BY request_key").fetchall()]
        keys = sorted_keys(f"AND hash(request_key) % {self.SAMPLE} = 0")
        if len(keys) < parts:  # (a sample too small to cut: every key)
            keys = sorted_keys()
        cuts = [_literal(keys[len(keys) * i // parts]) for i in range(1, parts)] if keys else []

        def part_view(t, part):
            if part > len(cuts):  # (no keys to cut at: the first part holds every row)
                return f"SELECT * FROM {sources[t]} WHERE false"
            where = []
            if part > 0:
                where.append(f"request_key >= {cuts[part - 1]}")
            if part < len(cuts):
                where.append(f"(request_key < {cuts[part]} OR request_key IS NULL)" if part == 0
                             else f"request_key < {cuts[part]}")
            return f"SELECT * FROM {sources[t]}" + (" WHERE " + " AND ".join(where) if where else "")
        return part_view


def _literal(text):
    """`text` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _stored(con, table):
    """The store's own `table`, named so that no temporary view of its name hides it."""
    (db,), = con.execute("SELECT current_database()").fetchall()
    return '"{}".main.{}'.format(db.replace('"', '""'), table)


class CodeStoreStep:
    """A table built by `module.build_all(con)` from the whole store."""

    scope = "store"

    def __init__(self, module):
        self.module = module
        self.table = module.TABLES[0]
        self.tables = tuple(module.TABLES)

    def version(self):  # its module's source and the modules in its `SOURCES`
        digest = hashlib.sha256(inspect.getsource(self.module).encode())
        for m in getattr(self.module, "SOURCES", ()):
            digest.update(inspect.getsource(m).encode())
        return digest.hexdigest()[:16]

    def write_all(self, con, target):
        return self.module.build_all(con, target)


def exists(con, table, kind=None, schema="main"):
    sql = ("SELECT count(*) FROM information_schema.tables WHERE table_name = ? "
           "AND table_schema = ?")
    args = [table, schema]
    if kind:
        sql += " AND table_type = ?"
        args.append(kind)
    return con.execute(sql, args).fetchall()[0][0] > 0
