"""A command's staged writes: what one ingest appends before it is visible.

Captures' rows are appended in short transactions under capture ids listed
in `ingests_in_progress` (the staged tables' views hide them); a `Command`
gathers every call's `Run` and makes all of them visible in one
transaction at its end, or deletes them (tracekit.pipeline.captures tells
the whole story).
"""

import contextlib
import os
import re
import threading

from ..readers.capture import hash_file
from ..store.arrow import FLOWS_SCHEMA, PACKETS_SCHEMA, gathered_table
from ..store.schema import CAPTURES, INTERFACES, storage
from ..store.writer import ROW_GROUP, AppendWriter

INSERT_ROWS = 2 * ROW_GROUP  # rows per DuckDB append: a row group per thread (store/writer.py)
# rows gathered into one Arrow table: a small file's packets and flows wait
# for the next files' (a table costs ~90 array constructions whatever its size)
GATHER_ROWS = 1 << 16
GATHERED = {"packets": PACKETS_SCHEMA, "flows": FLOWS_SCHEMA}  # tables put that way


class Hasher(threading.Thread):
    """The file's SHA-256, on its own thread (a small file's at once: a thread
    costs more than hashing it)."""

    SMALL = 1 << 20

    def __init__(self, path, size):
        super().__init__(daemon=True)
        self.path = path
        self.digest = None
        self.error = None
        self.small = size <= self.SMALL

    def start(self):
        if self.small:
            self.run()
        else:
            super().start()

    def join(self, timeout=None):
        if not self.small:
            super().join(timeout)

    def run(self):
        try:
            self.digest = hash_file(self.path)
        except OSError as e:  # reported by the main thread
            self.error = e


class Command:
    """Everything one command ingests (captures, logs, a manifest's runs):
    visible together at `commit`, or not at all. Captures' rows are appended as
    they are read (staged, hidden by their `ingests_in_progress` marker); one
    transaction then writes the catalogue rows and the logs and drops the markers."""

    def __init__(self, con):
        self.con = con
        self.runs = []  # Run of each load_captures call
        self.logs = []  # (store_logs arguments, list its summaries go into)
        self.digests = {}  # sha256 -> capture id over the whole command
        self.committed = False  # from then on nothing of it is discarded

    def commit(self):
        from .logs import store_logs
        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            for run in self.runs:
                run.commit_rows()
            for args, out in self.logs:
                out.extend(store_logs(con, *args))
            for run in self.runs:
                run.forget_ids()
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        # (the COMMIT was the last write: a fault after it, a full disk or
        # Ctrl-C, must not discard rows that are part of the store now)
        self.committed = True

    def discard(self):
        for run in self.runs:
            run.discard()


@contextlib.contextmanager
def command(con):
    """`with command(con) as c:` ingest with `command=c`; committed at the end of
    the block, discarded if it raises (Ctrl-C included)."""
    c = Command(con)
    try:
        yield c
        c.commit()
    except BaseException as e:
        if not c.committed:
            c.discard()
        else:  # what the command put in the store stays: its message must say so
            try:
                e.tracekit_committed = True
            except AttributeError:
                pass
        raise


def _delete_rows(con, ids, tables):
    for table in tables:
        con.execute(f"DELETE FROM {storage(table)} WHERE list_contains(?, capture_id)", [ids])


class Run:
    """The capture ids one `load_captures` call has started, and what finishing means.

    Every file gets its id up front, listed in `ingests_in_progress` (which
    hides its rows from the `packets` and `flows` views) before any row is
    appended. Rows of all files go through one writer thread, in appends of
    whole row groups, so a thousand small files cost a few appends, not a
    thousand.
    """

    def __init__(self, con, paths, digests=None, first=None):
        self.con = con
        self.query = con.cursor()  # the main thread's questions while the writer appends
        if first is None:
            (first,), = con.execute(
                "SELECT greatest((SELECT coalesce(max(capture_id), 0) FROM captures), "
                "(SELECT coalesce(max(capture_id), 0) FROM ingests_in_progress)) + 1").fetchall()
        self.ids = list(range(first, first + len(paths)))
        con.execute("INSERT INTO ingests_in_progress SELECT unnest(?::INTEGER[]), "
                    "unnest(?::VARCHAR[]), now()",
                    [self.ids, [os.path.abspath(p) for p in paths]])
        self.started = list(self.ids)  # capture ids whose rows may exist
        self.next = iter(self.ids)
        self.finals = []  # (captures row, interfaces rows) written by finish()
        self.replaced = []  # capture ids removed by finish()
        self.digests = {} if digests is None else digests  # sha256 -> capture id, this command
        self.stored = dict(con.execute("SELECT sha256, capture_id FROM captures").fetchall())
        self.writer = AppendWriter(con.cursor(), row_group=INSERT_ROWS,
                                   first=min(ROW_GROUP, INSERT_ROWS), lanes=2)
        self.writer.start()
        self.gathered = {target: [] for target in GATHERED}  # column parts not yet put
        self.gathered_rows = dict.fromkeys(GATHERED, 0)

    def put_rows(self, target, columns, rows):
        """Rows for the writer, as numpy columns: gathered with the next ones
        (of this file or the next) into one table of up to GATHER_ROWS."""
        self.gathered[target].append(columns)
        self.gathered_rows[target] += rows
        if self.gathered_rows[target] >= GATHER_ROWS:
            self._put(target)

    def put_gathered(self):
        for target in self.gathered:
            self._put(target)

    def _put(self, target):
        parts = self.gathered[target]
        if parts:
            self.writer.put(target, gathered_table(GATHERED[target], parts))
        self.gathered[target], self.gathered_rows[target] = [], 0

    def new_capture_id(self):
        return next(self.next)

    def drop(self, capture_id):
        """Forget a capture of this call (a duplicate found while loading)."""
        def forget(con):
            _delete_rows(con, [capture_id], ("packets", "flows", "payloads"))
            con.execute("DELETE FROM ingests_in_progress WHERE capture_id = ?", [capture_id])
        self.put_gathered()  # (its rows among them: deleted after they are appended)
        self.writer.call(forget)
        self.started.remove(capture_id)

    def finish(self):  # (each group put what it gathered)
        self.writer.finish()
        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            self.commit_rows()
            self.forget_ids()
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def commit_rows(self):
        """The catalogue rows that make this call's captures visible (in the
        caller's transaction)."""
        con = self.con
        if self.replaced:
            _delete_rows(con, self.replaced, ("packets", "flows", "payloads", "interfaces", "captures"))
        _insert_finals(con, self.finals)
        if self.started:
            con.execute("DELETE FROM ingests_in_progress WHERE list_contains(?, capture_id)",
                        [self.started])

    def forget_ids(self):
        # ids given to files that were not captures after all (or duplicates)
        self.con.execute("DELETE FROM ingests_in_progress WHERE list_contains(?, capture_id)",
                         [self.ids])
        self.started = []

    def discard(self):
        self.writer.abandon()
        _delete_rows(self.con, self.ids, ("packets", "flows", "payloads", "interfaces"))
        self.con.execute("DELETE FROM ingests_in_progress WHERE list_contains(?, capture_id)",
                         [self.ids])
        self.started = []


def _insert_finals(con, finals):
    """The captures and interfaces rows of a call, in two statements."""
    if not finals:
        return
    _insert_rows(con, "captures", CAPTURES, [row for row, _ in finals])
    interfaces = [dict(zip((c.name for c in INTERFACES), r)) for _, rows in finals for r in rows]
    if interfaces:
        _insert_rows(con, "interfaces", INTERFACES, interfaces)


def _insert_rows(con, table, columns, rows):
    """Insert rows ({column: value}; a MAP as (keys, values)) in one statement,
    each column a list parameter unnested. (Not through Arrow: pyarrow's
    array() imports pandas, 0.65-1 s of every ingest.)"""
    inner, outer, params = [], [], []
    for c in columns:
        typ = re.split(r" (?:PRIMARY KEY|NOT NULL|UNIQUE|DEFAULT)\b", c.sql)[0]
        if c.name == "ingested_at":
            outer.append("now()")
            continue
        values = [r.get(c.name) for r in rows]
        if typ.startswith("MAP("):
            key, value = typ[len("MAP("):-1].split(", ")
            inner += [f"unnest(?::{key}[][]) AS {c.name}_k", f"unnest(?::{value}[][]) AS {c.name}_v"]
            params += [[list(v[0]) for v in values], [list(v[1]) for v in values]]
            outer.append(f"MAP({c.name}_k, {c.name}_v)")
        else:
            inner.append(f"unnest(?::{typ}[]) AS {c.name}")
            params.append(values)
            outer.append(c.name)
    con.execute(f"INSERT INTO {table} SELECT {', '.join(outer)} "
                f"FROM (SELECT {', '.join(inner)})", params)
