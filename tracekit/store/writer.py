"""Append Arrow tables to the store on a thread, in whole row groups.

Strategy: a producer (a kernel over chunks of a capture) hands tables to
`AppendWriter.put` and goes on computing the next chunk while this thread
appends: DuckDB and the compiled kernels both release the GIL, so on two
cores they overlap. Rows are held back until a whole DuckDB row group
(122,880 rows) is ready and appended in multiples of it: an append of any
other size leaves a part-filled row group behind it that the next append
does not fill, and a table of part-filled groups costs several times more
to checkpoint (measured: 12.1 s against 1.6 s for 8.6 M rows of
`tcp_analysis`). Each append is its own transaction; the caller hides the
rows from queries until it is done (see store/schema.py, STAGED).

Whole row groups are also what each of DuckDB's threads must get. An
append is scanned one Arrow record batch at a time, a batch to a thread,
and a thread's share is written straight to the file only in whole row
groups: the rest is kept in memory and compressed again at the checkpoint,
and the blocks it was first written to are left as garbage in the file.
The producers' tables are cut where their chunks of frames end (a few
thousand to 131,072 rows), so every append is first cut again into
batches of exactly one row group (`row_groups`). Measured on the 2.9 M
rows of `tcp_analysis` in appends of two row groups with two threads:
6.0 s of appends and 6.9 s of checkpoint, a 238 MB file, before; 3.8 s
and none, 123 MB, after (`stalls`: 3.2 -> 1.0 s, 67 -> 37 MB).

With `lanes=2` (ingest) the appends are made by a second thread with a
cursor of its own, one at a time as before, while this thread goes on
taking rows; what is left at the end (or before a `call`) is appended here,
beside the lane's last append. A small capture's last rows no longer wait
for its first row group to be written (the 200 k slice: a row group, then
the last 77,120 rows, one after the other on one core each), and a large
one still has one append at a time while it is decoded (two at once, the
whole way, cost the 2.9 M-packet capture 0.2 CPU s and 60 MB more).

With `lanes=3` (`tcp_analysis`) two lanes take turns: two appends at once
the whole way. There the appends, not the kernels, set the pace (its
producer waited on a full queue); on the 2.9 M-packet capture the step
took 3.05-3.17 s against 3.53-4.07 (three alternated analyze runs each),
the same CPU, ~60 MB more at analyze's peak (docs/benchmarks.md; stalls'
and ingest's appends gained nothing from it). A writer on a connection
inside a transaction (a small capture's build is one) appends on that
connection alone: a lane's cursor would append outside the transaction.
"""

import queue
import threading

import pyarrow as pa

from .arrow import append
from .db import in_transaction

ROW_GROUP = 122_880  # DuckDB's row group size
# Rows per append for the per-packet tables: with insertion order not kept,
# DuckDB writes the row groups of one append from both of its threads (an
# append of one group is one thread's). tcp_analysis of 2.9 M packets:
# 10.7-12.3 s in appends of one group, 8.7-9.2 s of two, 7.9-8.4 s of four
# (80 MB more held: analyze's peak memory must stay under 1 GiB)
APPEND_ROWS = 2 * ROW_GROUP
COMPACT = 64  # small tables held before they are copied into one


class _Lane(threading.Thread):
    """The appender of `lanes=2`: one append at a time on a cursor of its own."""

    def __init__(self, con):
        super().__init__(daemon=True)
        self.con = con.cursor()
        self.jobs = queue.Queue()
        self.idle = threading.Event()
        self.idle.set()
        self.error = None

    def run(self):
        while True:
            job = self.jobs.get()
            if job is None:
                self.con.close()
                return
            try:
                if self.error is None:
                    append(self.con, *job)
            except BaseException as e:  # re-raised by the writer
                self.error = e
            finally:
                del job
                self.idle.set()

    def give(self, target, rows):
        self.idle.clear()
        self.jobs.put((target, rows))

    def wait(self):
        """Until its append is done; re-raise its error if any."""
        self.idle.wait()
        if self.error is not None:
            raise self.error

    def stop(self):
        self.jobs.put(None)
        self.join()


class AppendWriter(threading.Thread):
    def __init__(self, con, row_group=APPEND_ROWS, first=None, lanes=1):
        super().__init__(daemon=True)
        self.con = con
        if lanes > 1 and in_transaction(con):
            lanes = 1  # a lane's cursor would append outside the caller's transaction
        self.lanes = [_Lane(con) for _ in range(lanes - 1)]  # (module docstring)
        self.turn = 0  # the lane the next append goes to
        self.row_group = row_group
        # rows of a table's first append (a multiple of ROW_GROUP, default
        # row_group): fewer, so that a small capture's first rows are written
        # while the producer decodes the rest instead of all after it
        self.first = first or row_group
        self.appended = set()  # tables appended to at least once
        self.queue = queue.Queue(maxsize=1)
        self.pending = {}  # table -> ([Arrow tables], rows, tables put since the last compaction)
        self.error = None

    def start(self):
        for lane in self.lanes:
            lane.start()
        super().start()

    def run(self):
        while True:
            item = self.queue.get()
            if item is None:
                for lane in self.lanes:
                    lane.stop()  # (its append done before the caller goes on)
                return
            if self.error is not None:
                continue  # drain after a failure
            try:
                self._take(*item)
            except BaseException as e:  # re-raised by the producer
                self.error = e

    def _flush(self):
        for name, (tables, _, _) in self.pending.items():
            if tables:
                joined = pa.concat_tables(tables, promote_options="permissive")
                self._append(name, row_groups(joined), here=True)
        self.pending = {}
        for lane in self.lanes:
            lane.wait()  # every row put so far is appended

    def _append(self, target, rows, here=False):
        """Append on the next lane, after its previous append (or `here`, on
        this thread, beside them); without lanes, here."""
        if not self.lanes or here:
            append(self.con, target, rows)
            return
        lane = self.lanes[self.turn]
        self.turn = (self.turn + 1) % len(self.lanes)
        lane.wait()  # one append at a time on a lane; its error, if any
        lane.give(target, rows)

    def _take(self, target, table):
        if target is None:  # the end: append everything held back
            self._flush()
            return
        if callable(target):  # a task that must see every row put before it
            self._flush()
            target(self.con)
            return
        tables, rows, fresh = self.pending.get(target, ([], 0, 0))
        tables.append(table)
        rows += table.num_rows
        fresh += 1
        unit = self.row_group if target in self.appended else self.first
        if rows >= unit:
            if self.lanes:  # (before the copy below: one append's rows held a lane)
                self.lanes[self.turn].wait()
            whole = rows - rows % unit
            self.appended.add(target)
            joined = pa.concat_tables(tables, promote_options="permissive")
            rows_now = row_groups(joined.slice(0, whole))
            rest = joined.slice(whole)
            # rows_now is a copy: the tables held for it can go before it is appended
            del joined, tables[:]
            self.pending[target] = ([rest] if rest.num_rows else []), rest.num_rows, 0
            self._append(target, rows_now)
            return
        if fresh >= COMPACT:
            # many small files put many small tables, each holding its buffers
            # (and the decoded batch they are views of) until a row group fills:
            # ~110 kB a file with 50-packet captures. The last COMPACT are copied
            # into one, so what is held grows with rows, not with files.
            tables[-fresh:] = [pa.concat_tables(tables[-fresh:], promote_options="permissive")
                               .combine_chunks()]
            fresh = 0
        self.pending[target] = (tables, rows, fresh)

    def put(self, target, table):
        if self.error is not None:
            raise self.error
        if table.num_rows:
            self.queue.put((target, table))

    def call(self, fn):
        """Run fn(con) on this thread after the rows put so far are appended."""
        if self.error is not None:
            raise self.error
        self.queue.put((fn, None))

    def abandon(self):
        """Stop without appending what is held back (the caller deletes the rest)."""
        self.error = self.error or RuntimeError("abandoned")
        self.queue.put(None)
        self.join()

    def finish(self):
        """Append what is left and wait; re-raise the thread's error if any."""
        self.queue.put((None, None))
        self.queue.put(None)
        self.join()
        if self.error is not None:
            raise self.error


def row_groups(table):
    """`table` as record batches of exactly one DuckDB row group each (the
    last may be shorter): the unit each of DuckDB's threads takes. Only a row
    group that spans chunks of `table` is copied into one; the others are
    views of their chunk (copying all was ~7 % of the writer's time on 2.9 M
    packets)."""
    batches = []
    for begin in range(0, table.num_rows, ROW_GROUP):
        part = table.slice(begin, ROW_GROUP)
        if part.num_columns and part.column(0).num_chunks > 1:
            part = part.combine_chunks()
        batches += part.to_batches()
    return pa.Table.from_batches(batches, schema=table.schema)
