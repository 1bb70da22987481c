"""Load captures into the store: read, decode, track flows, append, summarise.

Strategy: each file streams through in batches: read (capture/), decode
(decode/, pure), flow tracking (decode/flows.py, state carried between
batches), then Arrow appends to `packets` on a writer thread, so decoding and
DuckDB's writing overlap on two cores. The file's SHA-256 is computed in a
third thread, and a file already in the store is abandoned as soon as the
hash is known. Small files are read ahead and decoded together
(store/reading.py); the rest of their work stays per file.

All or nothing, in bounded memory: one DuckDB transaction holding millions of
appended rows keeps growing in memory, so packets are appended in their own
short transactions under a capture id that is not yet in `captures`, and
listed in `ingests_in_progress`. Only the final transaction, which writes
the `captures` and `interfaces` rows of every file of the call (and removes
replaced captures), makes them part of the store. On any failure (a file
that is not a capture, a full disk, Ctrl-C) the appended rows are deleted
again; after a crash, the next ingest finds them in `ingests_in_progress`
and deletes them first. Either way the store ends up exactly as it was.
"""

import contextlib
import os
import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import TracekitError
from ..core.jit import prefer_compiled
from ..core.version import __version__
from ..readers.capture import hash_file, open_capture
from ..readers.capture.base import DEFAULT_BATCH_PACKETS, DEFAULT_CHUNK_BYTES
from ..readers.decode.addresses import address_dictionary
from ..readers.decode.flows import FlowTable
from ..readers.decode.link import SUPPORTED_LINK_TYPES, link_type_name
from ..readers.decode.payloads import PayloadKeeper
from ..readers.decode.status import CODE, STATUS
from ..store.arrow import (
    FLOWS_SCHEMA,
    PACKETS_SCHEMA,
    flow_columns,
    gathered_table,
    packet_columns,
)
from ..store.db import settings
from ..store.recovery import recover_ingests
from ..store.schema import CAPTURES, INTERFACES, storage
from ..store.writer import ROW_GROUP, AppendWriter
from .reading import decoded_batches, file_size, open_file, prefetch, small_file_groups

INSERT_ROWS = 2 * ROW_GROUP  # rows per DuckDB append: a row group per thread (store/writer.py)
# rows gathered into one Arrow table: a small file's packets and flows wait
# for the next files' (a table costs ~90 array constructions whatever its size)
GATHER_ROWS = 1 << 16
GATHERED = {"packets": PACKETS_SCHEMA, "flows": FLOWS_SCHEMA}  # tables put that way
INGEST_MEMORY_LIMIT = "288MB"  # DuckDB's share while ingesting: peak RSS stays under 1 GiB


@dataclass
class CaptureSummary:
    path: str
    capture_id: int | None = None
    outcome: str = "ingested"  # ingested, replaced, duplicate
    packets: int = 0
    flows: int = 0
    decode_status: dict = field(default_factory=dict)
    skipped_blocks: dict = field(default_factory=dict)
    unsupported_link_types: list = field(default_factory=list)
    read_stop: object = None
    first_bad_ts_offset: int | None = None  # file offset of the first timestamp_out_of_range
    late_packets: int = 0  # packets timed in 2200 or later (held, but likely a wrong clock)
    first_late_offset: int | None = None
    seconds: float = 0.0
    duplicate_of: int | None = None  # the stored capture this file duplicates or replaces

    def unsupported_link_type_names(self):
        """Names of the link types whose packets were stored undecoded."""
        return [link_type_name(lt) for lt in self.unsupported_link_types]


class _Duplicate(Exception):
    def __init__(self, capture_id):
        self.capture_id = capture_id


class _Hasher(threading.Thread):
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
        self.runs = []  # _Run of each load_captures call
        self.logs = []  # (store_logs arguments, list its summaries go into)
        self.digests = {}  # sha256 -> capture id over the whole command

    def commit(self):
        from .logs import store_logs
        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            for run in self.runs:
                run.commit_rows()
            for args, out in self.logs:
                out.extend(store_logs(con, *args))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        for run in self.runs:
            run.forget_ids()

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
    except BaseException:
        c.discard()
        raise


def load_captures(con, paths, labels=None, replace=False, progress=None,
                  batch_packets=DEFAULT_BATCH_PACKETS, chunk_bytes=DEFAULT_CHUNK_BYTES,
                  command=None, first_capture_id=None):
    """Ingest capture files, all or nothing; return one CaptureSummary each.

    `labels` is a dict for every file, or a list of dicts, one per path.
    `progress(path, done_bytes, total_bytes)` is called after every batch.
    With `command` (a Command) the captures become visible when it commits.
    `first_capture_id` numbers them from there instead of after the store's
    last (a dataset's task: the coordinator has chosen the id).
    """
    # Let DuckDB write row groups as they fill instead of reordering them at
    # checkpoint: halves the cost of persisting packets. Row order on disk is
    # then by batch, not strictly by frame: queries that need capture order
    # say ORDER BY frame (they must anyway). Appends of two row groups, cut
    # into batches of one (store/writer.py): each of DuckDB's two threads
    # writes a whole row group straight to the file while decoding goes on
    # (2.9 M packets at 128 bytes, three alternated runs: 7.9-8.5 s and
    # 793-797 MB with one DuckDB thread and appends of four groups as they
    # came; 6.0-7.9 s and 735-749 MB now).
    with settings(con, preserve_insertion_order=False, memory_limit=INGEST_MEMORY_LIMIT):
        return _load_all(con, [str(p) for p in paths], labels, replace, progress,
                         batch_packets, chunk_bytes, command, first_capture_id)


def _load_all(con, paths, labels, replace, progress, batch_packets, chunk_bytes, command,
              first_capture_id):
    per_path = iter(labels if isinstance(labels, list) else [labels or {}] * len(paths))
    run = None
    try:
        if command is None:  # (a command's earlier calls have markers that are not orphans)
            recover_ingests(con)
        # many small files together pay the compiled scanners' start-up once
        prefer_compiled(sum(file_size(p) or 0 for p in paths))
        run = _Run(con, paths, command.digests if command else None, first_capture_id)
        summaries = []
        for group in small_file_groups(paths, chunk_bytes):
            # small files are read ahead and decoded together: one decode of
            # many packets costs little more than one of a few
            prepared = (prefetch(group, chunk_bytes, batch_packets) if len(group) > 1
                        else [None])
            try:
                summaries += [_load_one(run, path, next(per_path), replace, progress,
                                        batch_packets, chunk_bytes, ahead)
                              for path, ahead in zip(group, prepared)]
                run.put_gathered()
            finally:  # (each file is closed once loaded; the rest, after a failure)
                for ahead in prepared:
                    if ahead is not None:
                        ahead[0].close()
        if command is not None:  # (each group put what it gathered)
            run.writer.finish()  # every row appended now (still hidden): no memory held
            command.runs.append(run)
        else:
            run.finish()
        return summaries
    except BaseException:
        if run is not None:
            run.discard()
        raise


def _delete_rows(con, ids, tables):
    for table in tables:
        con.execute(f"DELETE FROM {storage(table)} WHERE list_contains(?, capture_id)", [ids])


class _Run:
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
        self.writer = AppendWriter(con.cursor(), row_group=INSERT_ROWS)
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
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        self.forget_ids()

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


def _load_one(run, path, labels, replace, progress, batch_packets, chunk_bytes, prepared=None):
    """One file; `prepared` is what `prefetch` read and decoded of it, if anything."""
    started = time.perf_counter()
    summary = CaptureSummary(path=os.path.abspath(path))
    if prepared is None:
        fileobj, size = open_file(path)
        reader, decoded = None, None
    else:
        fileobj, size, reader, decoded = prepared
    with fileobj:
        if reader is None:
            reader = open_capture(path, fileobj, chunk_bytes, batch_packets)
        hasher = _Hasher(path, size)
        hasher.start()
        capture_id = run.new_capture_id()
        summary.capture_id = capture_id
        try:
            totals = _load_packets(run, reader, capture_id, summary, hasher, size, progress,
                                   replace, decoded)
        except _Duplicate as d:
            run.drop(capture_id)
            summary.outcome = "duplicate"
            summary.duplicate_of = summary.capture_id = d.capture_id
            summary.packets = summary.flows = 0
            summary.decode_status = {}
            summary.seconds = time.perf_counter() - started
            return summary
        if hasher.error:
            raise TracekitError(f"{path}: cannot read: {hasher.error}")
    run.digests[hasher.digest] = capture_id
    old = run.stored.get(hasher.digest)
    if old is not None:  # only reached with replace=True
        run.replaced.append(old)
        summary.outcome = "replaced"
        summary.duplicate_of = old
    summary.read_stop = reader.stop
    summary.skipped_blocks = dict(reader.stats.skipped_blocks)
    summary.unsupported_link_types = sorted(
        {i.link_type for i in reader.interfaces} - SUPPORTED_LINK_TYPES)
    run.finals.append((
        _capture_row(capture_id, path, hasher.digest, size, reader, summary, labels, totals),
        _interface_rows(capture_id, reader, totals["per_interface"])))
    summary.seconds = time.perf_counter() - started
    return summary


class _DuplicateCheck:
    """Asks, once the file's hash is known, whether it is already stored."""

    def __init__(self, hasher, run, replace):
        self.hasher = hasher
        self.run = run
        self.replace = replace
        self.asked = False
        self.found = None

    def poll(self, wait=False):
        h = self.hasher
        if self.asked:
            return
        if h.digest is None and h.error is None:
            if not wait:
                return
            h.join()
        if h.digest is None:
            return
        self.asked = True
        if h.digest in self.run.digests:  # the same file twice in one call
            self.found = self.run.digests[h.digest]
        elif not self.replace:
            self.found = self.run.stored.get(h.digest)


def _load_packets(run, reader, capture_id, summary, hasher, size, progress, replace,
                  decoded=None):
    table = FlowTable(jit=reader.jit)
    keeper = PayloadKeeper()
    address_cache = {}
    status_counts = np.zeros(len(STATUS), np.int64)
    writer = run.writer
    check = _DuplicateCheck(hasher, run, replace)
    per_interface = np.zeros(1, np.int64)
    first_ts, last_ts = None, None
    for batch, link_type, cols in (decoded_batches(reader) if decoded is None else decoded):
        bad = batch.ts_bad
        if bad is not None and bad.any():
            # (a packet of an undescribed interface has no time either, and says why)
            out = bad & (cols["status"] != CODE["no_such_interface"])
            cols["status"][out] = CODE["timestamp_out_of_range"]
            if summary.first_bad_ts_offset is None and out.any():
                summary.first_bad_ts_offset = int(batch.file_offset[np.argmax(out)])
        else:
            bad = None
        # in no flow: a time that is unknown, a TCP header whose length is impossible
        # (its payload length is unknown: Wireshark does not analyse it either)
        exclude = cols["status"] == CODE["bad_tcp_header"]
        if bad is not None:
            exclude |= bad
        flow_id, from_client, shift = table.track(cols, batch.ts_ns, batch.first_frame,
                                                  batch.wire_bytes, exclude)
        kept = keeper.batch(capture_id, batch, cols, flow_id, from_client)
        if kept is not None:
            writer.put("payloads", kept)
        src_idx, dst_idx = address_dictionary(
            [(cols["src_hi"], cols["src_lo"], cols["addr_ok"]),
             (cols["dst_hi"], cols["dst_lo"], cols["addr_ok"])], address_cache)
        run.put_rows("packets", packet_columns(capture_id, batch, link_type, cols, flow_id,
                                               from_client, shift, src_idx, dst_idx,
                                               address_cache["_list"]), len(batch))
        status_counts += np.bincount(cols["status"], minlength=len(STATUS))
        known = batch.interface_id[batch.interface_id >= 0]
        if len(known):
            counts = np.bincount(known)
            if len(counts) > len(per_interface):
                per_interface = np.concatenate(
                    [per_interface, np.zeros(len(counts) - len(per_interface), np.int64)])
            per_interface[:len(counts)] += counts
        _count_late(summary, batch, bad)
        ts = batch.ts_ns if bad is None else batch.ts_ns[~bad]
        if len(ts):
            lo, hi = int(ts.min()), int(ts.max())
            first_ts = lo if first_ts is None else min(first_ts, lo)
            last_ts = hi if last_ts is None else max(last_ts, hi)
        summary.packets += len(batch)
        check.poll()
        if check.found is not None:
            break
        if progress:
            progress(summary.path, int(batch.file_offset[-1]), size)
    check.poll(wait=True)
    if check.found is not None:
        raise _Duplicate(check.found)
    stats, ends = table.flows()
    summary.flows = len(stats)
    run.put_rows("flows", flow_columns(capture_id, stats, ends, address_cache), len(stats))
    summary.decode_status = {STATUS[i]: int(c) for i, c in enumerate(status_counts)
                             if i and c}
    return {"per_interface": per_interface, "first_ts_ns": first_ts, "last_ts_ns": last_ts}


LATE_NS = 7_258_118_400 * 10**9  # 2200-01-01: a time held, but one to warn about


def _count_late(summary, batch, bad):
    late = batch.ts_ns >= LATE_NS
    if bad is not None:
        late &= ~bad
    if late.any():
        summary.late_packets += int(late.sum())
        if summary.first_late_offset is None:
            summary.first_late_offset = int(batch.file_offset[np.argmax(late)])


def _interface_rows(capture_id, reader, per_interface):
    return [[capture_id, i.interface_id, i.section, i.link_type, link_type_name(i.link_type),
             i.snaplen, i.ts_resolution, i.ts_offset_s, i.name, i.description,
             int(per_interface[i.interface_id]) if i.interface_id < len(per_interface) else 0]
            for i in reader.interfaces]


def _capture_row(capture_id, path, digest, size, reader, summary, labels, totals):
    """The `captures` row of a file, by column (maps as (keys, values))."""
    stop = reader.stop
    resolutions = ",".join(dict.fromkeys(i.ts_resolution for i in reader.interfaces)) or "1e-6"
    return {
        "capture_id": capture_id, "path": os.path.abspath(path),
        "file_name": os.path.basename(path), "sha256": digest, "size_bytes": size,
        "format": reader.format, "byte_order": reader.byte_order,
        "link_types": sorted({i.link_type for i in reader.interfaces}),
        "snaplen": reader.snaplen, "ts_resolution": resolutions,
        "sections": getattr(reader, "sections", 1), "interfaces": len(reader.interfaces),
        "packets": summary.packets, "first_ts_ns": totals["first_ts_ns"],
        "last_ts_ns": totals["last_ts_ns"],
        "skipped_blocks": (list(summary.skipped_blocks), list(summary.skipped_blocks.values())),
        "decode_status_counts": (list(summary.decode_status),
                                 list(summary.decode_status.values())),
        "read_stop": stop.reason if stop else None,
        "read_stop_offset": stop.offset if stop else None,
        "read_stop_message": stop.message if stop else None,
        "labels": (list(labels), list(labels.values())),
        "tracekit_version": __version__,
        "payloads_kept": True,
    }
