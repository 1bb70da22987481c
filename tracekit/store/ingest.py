"""Load captures into the store: read, decode, track flows, append, summarise.

Strategy: each file streams through in batches: read (capture/), decode
(decode/, pure), flow tracking (decode/flows.py, state carried between
batches), then Arrow appends to `packets` on a writer thread, so decoding and
DuckDB's writing overlap on two cores. The file's SHA-256 is computed in a
third thread, and a file already in the store is abandoned as soon as the
hash is known.

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

import os
import queue
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from .. import __version__
from ..capture import hash_file, open_capture
from ..capture.base import DEFAULT_BATCH_PACKETS, DEFAULT_CHUNK_BYTES
from ..decode.addresses import address_dictionary
from ..decode.flows import FlowTable
from ..decode.link import SUPPORTED_LINK_TYPES, link_type_name
from ..decode.packets import decode_packets
from ..decode.status import STATUS
from ..errors import TracekitError
from .arrow import FLOWS_SCHEMA, flows_table, packets_table
from .schema import storage

INSERT_ROWS = 1 << 19  # rows per DuckDB append (bigger: a little faster, more memory)
INGEST_MEMORY_LIMIT = "512MB"  # DuckDB's share while ingesting: peak RSS stays under 1 GiB


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
    seconds: float = 0.0
    duplicate_of: int | None = None  # the stored capture this file duplicates or replaces


class _Duplicate(Exception):
    def __init__(self, capture_id):
        self.capture_id = capture_id


class _Hasher(threading.Thread):
    def __init__(self, path):
        super().__init__(daemon=True)
        self.path = path
        self.digest = None
        self.error = None

    def run(self):
        try:
            self.digest = hash_file(self.path)
        except OSError as e:  # reported by the main thread
            self.error = e


def load_captures(con, paths, labels=None, replace=False, progress=None,
                  batch_packets=DEFAULT_BATCH_PACKETS, chunk_bytes=DEFAULT_CHUNK_BYTES):
    """Ingest capture files, all or nothing; return one CaptureSummary each.

    `progress(path, done_bytes, total_bytes)` is called after every batch.
    """
    # Let DuckDB write row groups from both threads as they fill instead of
    # reordering them at checkpoint: halves the cost of persisting packets.
    # Row order on disk is then by batch, not strictly by frame: queries that
    # need capture order say ORDER BY frame (they must anyway).
    (keep_order, keep_limit), = con.execute(
        "SELECT current_setting('preserve_insertion_order'), "
        "current_setting('memory_limit')").fetchall()
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"SET memory_limit = '{INGEST_MEMORY_LIMIT}'")
    run = _Run(con)
    try:
        recover_unfinished(con)
        summaries = [_load_one(run, str(path), labels or {}, replace, progress,
                               batch_packets, chunk_bytes) for path in paths]
        run.finish()
        return summaries
    except BaseException:
        run.discard()
        raise
    finally:
        con.execute(f"SET preserve_insertion_order = {bool(keep_order)}")
        con.execute(f"SET memory_limit = '{keep_limit}'")


def recover_unfinished(con):
    """Delete the rows of ingests that never finished (a crash or a kill)."""
    ids = [r[0] for r in con.execute("SELECT capture_id FROM ingests_in_progress").fetchall()]
    if ids:
        _delete_rows(con, ids, ("packets", "flows", "interfaces"))
        con.execute("DELETE FROM ingests_in_progress")
    return ids


def _delete_rows(con, ids, tables):
    for table in tables:
        con.execute(f"DELETE FROM {storage(table)} WHERE list_contains(?, capture_id)", [ids])


class _Run:
    """The capture ids one `load_captures` call has started, and what finishing means."""

    def __init__(self, con):
        self.con = con
        self.started = []  # capture ids with rows appended
        self.finals = []  # (captures row, interfaces rows) written by finish()
        self.replaced = []  # capture ids removed by finish()
        self.digests = {}  # sha256 -> capture id, within this call

    def new_capture_id(self, path):
        (cid,), = self.con.execute(
            "SELECT greatest((SELECT coalesce(max(capture_id), 0) FROM captures), "
            "(SELECT coalesce(max(capture_id), 0) FROM ingests_in_progress)) + 1").fetchall()
        self.con.execute("INSERT INTO ingests_in_progress VALUES (?, ?, now())",
                         [cid, os.path.abspath(path)])
        self.started.append(cid)
        return cid

    def drop(self, capture_id):
        """Forget a capture of this call (a duplicate found while loading)."""
        _delete_rows(self.con, [capture_id], ("packets", "flows"))
        self.con.execute("DELETE FROM ingests_in_progress WHERE capture_id = ?", [capture_id])
        self.started.remove(capture_id)

    def finish(self):
        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            if self.replaced:
                _delete_rows(con, self.replaced, ("packets", "flows", "interfaces", "captures"))
            for capture_row, interface_rows in self.finals:
                if interface_rows:
                    con.executemany(
                        "INSERT INTO interfaces VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        interface_rows)
                con.execute(CAPTURE_INSERT, capture_row)
            if self.started:
                con.execute("DELETE FROM ingests_in_progress WHERE list_contains(?, capture_id)",
                            [self.started])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        self.started = []

    def discard(self):
        if self.started:
            _delete_rows(self.con, self.started, ("packets", "flows", "interfaces"))
            self.con.execute("DELETE FROM ingests_in_progress WHERE list_contains(?, capture_id)",
                             [self.started])
            self.started = []


def _existing(con, digest):
    rows = con.execute("SELECT capture_id FROM captures WHERE sha256 = ?", [digest]).fetchall()
    return rows[0][0] if rows else None


def _load_one(run, path, labels, replace, progress, batch_packets, chunk_bytes):
    started = time.perf_counter()
    summary = CaptureSummary(path=os.path.abspath(path))
    try:
        size = os.stat(path).st_size
        fileobj = open(path, "rb")
    except OSError as e:
        raise TracekitError(f"{path}: cannot read: {e.strerror}") from None
    with fileobj:
        reader = open_capture(path, fileobj, chunk_bytes, batch_packets)
        hasher = _Hasher(path)
        hasher.start()
        capture_id = run.new_capture_id(path)
        summary.capture_id = capture_id
        try:
            totals = _load_packets(run, reader, capture_id, summary, hasher, size, progress,
                                   replace)
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
    old = _existing(run.con, hasher.digest)
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


class _Writer(threading.Thread):
    """Appends Arrow tables to `packets` while the main thread decodes the next ones.

    DuckDB releases the GIL while it writes, so on two cores decoding and
    writing overlap. The connection is used by this thread only until
    `finish()` returns. Items are Arrow tables, or callables run in order.
    """

    def __init__(self, con):
        super().__init__(daemon=True)
        self.con = con
        self.queue = queue.Queue(maxsize=1)
        self.error = None

    def run(self):
        while True:
            item = self.queue.get()
            if item is None:
                return
            if self.error is not None:
                continue  # drain after a failure
            try:
                if callable(item):
                    item(self.con)
                else:
                    target = storage("flows" if item.schema.names == FLOWS_SCHEMA.names
                                     else "packets")
                    self.con.register("_tracekit_batch", item)
                    self.con.execute(f"INSERT INTO {target} SELECT * FROM _tracekit_batch")
                    self.con.unregister("_tracekit_batch")
            except BaseException as e:  # re-raised in the main thread
                self.error = e

    def put(self, item):
        if self.error is not None:
            raise self.error
        self.queue.put(item)

    def finish(self):
        self.queue.put(None)
        self.join()
        if self.error is not None:
            raise self.error


class _DuplicateCheck:
    """Asks, on the writer thread, whether the file's hash is already stored."""

    def __init__(self, hasher, run, replace):
        self.hasher = hasher
        self.run = run
        self.replace = replace
        self.asked = False
        self.found = None

    def poll(self, writer, wait=False):
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
            return
        if self.replace:
            return

        def ask(con):
            self.found = _existing(con, h.digest)
        writer.put(ask)


def _load_packets(run, reader, capture_id, summary, hasher, size, progress, replace):
    insert_rows = INSERT_ROWS
    table = FlowTable(jit=reader.jit)
    address_cache = {}
    status_counts = np.zeros(len(STATUS), np.int64)
    link_types = None
    pending, pending_rows = [], 0
    writer = _Writer(run.con)
    writer.start()
    check = _DuplicateCheck(hasher, run, replace)
    per_interface = np.zeros(1, np.int64)
    first_ts, last_ts = None, None
    try:
        for batch in reader.batches():
            if link_types is None or len(link_types) != len(reader.interfaces) + 1:
                link_types = np.array([i.link_type for i in reader.interfaces] + [-1], np.int32)
            link_type = link_types[batch.interface_id]
            cols = decode_packets(batch.data, batch.data_offset, batch.captured_bytes,
                                  batch.wire_bytes, link_type)
            flow_id, from_client, shift = table.track(cols, batch.ts_ns, batch.first_frame,
                                                      batch.wire_bytes)
            src_idx, dst_idx = address_dictionary(
                [(cols["src_hi"], cols["src_lo"], cols["addr_ok"]),
                 (cols["dst_hi"], cols["dst_lo"], cols["addr_ok"])], address_cache)
            pending.append(packets_table(capture_id, batch, link_type, cols, flow_id,
                                         from_client, shift, src_idx, dst_idx,
                                         address_cache["_list"]))
            pending_rows += len(batch)
            if pending_rows >= insert_rows:
                writer.put(pa.concat_tables(pending, promote_options="permissive"))
                pending, pending_rows = [], 0
            status_counts += np.bincount(cols["status"], minlength=len(STATUS))
            known = batch.interface_id[batch.interface_id >= 0]
            if len(known):
                counts = np.bincount(known)
                if len(counts) > len(per_interface):
                    per_interface = np.concatenate(
                        [per_interface, np.zeros(len(counts) - len(per_interface), np.int64)])
                per_interface[:len(counts)] += counts
            lo, hi = int(batch.ts_ns.min()), int(batch.ts_ns.max())
            first_ts = lo if first_ts is None else min(first_ts, lo)
            last_ts = hi if last_ts is None else max(last_ts, hi)
            summary.packets += len(batch)
            check.poll(writer)
            if check.found is not None:
                break
            if progress:
                progress(summary.path, int(batch.file_offset[-1]), size)
        if pending and check.found is None:
            writer.put(pa.concat_tables(pending, promote_options="permissive"))
        check.poll(writer, wait=True)
        if check.found is None:
            stats, ends = table.flows()
            summary.flows = len(stats)
            writer.put(flows_table(capture_id, stats, ends, address_cache))
    finally:
        writer.finish()
    if check.found is not None:
        raise _Duplicate(check.found)
    summary.decode_status = {STATUS[i]: int(c) for i, c in enumerate(status_counts)
                             if i and c}
    return {"per_interface": per_interface, "first_ts_ns": first_ts, "last_ts_ns": last_ts}


CAPTURE_INSERT = (
    "INSERT INTO captures VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
    "MAP(?::VARCHAR[], ?::BIGINT[]), MAP(?::VARCHAR[], ?::BIGINT[]), ?, ?, ?, "
    "MAP(?::VARCHAR[], ?::VARCHAR[]), now(), ?)")


def _interface_rows(capture_id, reader, per_interface):
    return [[capture_id, i.interface_id, i.section, i.link_type, link_type_name(i.link_type),
             i.snaplen, i.ts_resolution, i.ts_offset_s, i.name, i.description,
             int(per_interface[i.interface_id]) if i.interface_id < len(per_interface) else 0]
            for i in reader.interfaces]


def _capture_row(capture_id, path, digest, size, reader, summary, labels, totals):
    stop = reader.stop
    resolutions = ",".join(dict.fromkeys(i.ts_resolution for i in reader.interfaces)) or "1e-6"
    return [capture_id, os.path.abspath(path), os.path.basename(path), digest, size,
            reader.format, reader.byte_order,
            sorted({i.link_type for i in reader.interfaces}), reader.snaplen, resolutions,
            getattr(reader, "sections", 1), len(reader.interfaces), summary.packets,
            totals["first_ts_ns"], totals["last_ts_ns"],
            list(summary.skipped_blocks), list(summary.skipped_blocks.values()),
            list(summary.decode_status), list(summary.decode_status.values()),
            stop.reason if stop else None, stop.offset if stop else None,
            stop.message if stop else None,
            list(labels), list(labels.values()), __version__]
