"""Load captures into the store: read, decode, track flows, append, summarise.

Strategy: one DuckDB transaction per `load_captures` call, so a failure at
any point (a file that is not a capture, a full disk, Ctrl-C) leaves the
database exactly as it was. Each file streams through in batches: read
(capture/), decode (decode/, pure), flow tracking (decode/flows.py, state
carried between batches), then one Arrow append per batch. The file's
SHA-256 is computed in a second thread while the first one parses, and a
file already in the store is abandoned as soon as the hash is known.
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
    duplicate_of: int | None = None


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
    """Ingest capture files in one transaction; return one CaptureSummary each.

    `progress(path, done_bytes, total_bytes)` is called after every batch.
    """
    summaries = []
    # Let DuckDB write row groups from both threads as they fill instead of
    # reordering them at checkpoint: halves the cost of persisting packets.
    # Row order on disk is then by batch, not strictly by frame: queries that
    # need capture order say ORDER BY frame (they must anyway).
    (keep_order, keep_limit), = con.execute(
        "SELECT current_setting('preserve_insertion_order'), "
        "current_setting('memory_limit')").fetchall()
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"SET memory_limit = '{INGEST_MEMORY_LIMIT}'")
    con.execute("BEGIN TRANSACTION")
    try:
        for path in paths:
            summaries.append(_load_one(con, str(path), labels or {}, replace, progress,
                                       batch_packets, chunk_bytes))
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    finally:
        con.execute(f"SET preserve_insertion_order = {bool(keep_order)}")
        con.execute(f"SET memory_limit = '{keep_limit}'")
    return summaries


def _existing(con, digest):
    rows = con.execute("SELECT capture_id FROM captures WHERE sha256 = ?", [digest]).fetchall()
    return rows[0][0] if rows else None


def _delete_capture(con, capture_id):
    for table in ("packets", "flows", "interfaces", "captures"):
        con.execute(f"DELETE FROM {table} WHERE capture_id = ?", [capture_id])


def _load_one(con, path, labels, replace, progress, batch_packets, chunk_bytes):
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
        if replace:
            hasher.run()
            old = _existing(con, hasher.digest)
            if old is not None:
                _delete_capture(con, old)
                summary.outcome = "replaced"
            capture_id = old
        else:
            hasher.start()
            capture_id = None
        if capture_id is None:
            capture_id = con.execute(
                "SELECT coalesce(max(capture_id), 0) + 1 FROM captures").fetchall()[0][0]
        summary.capture_id = capture_id
        try:
            _load_packets(con, reader, capture_id, summary, hasher, size, progress)
        except _Duplicate as d:
            for t in ("packets", "flows"):
                con.execute(f"DELETE FROM {t} WHERE capture_id = ?", [capture_id])
            summary.outcome = "duplicate"
            summary.duplicate_of = d.capture_id
            summary.capture_id = d.capture_id
            summary.packets = 0
            summary.seconds = time.perf_counter() - started
            return summary
        if hasher.error:
            raise TracekitError(f"{path}: cannot read: {hasher.error}")
    summary.read_stop = reader.stop
    summary.skipped_blocks = dict(reader.stats.skipped_blocks)
    summary.unsupported_link_types = sorted(
        {i.link_type for i in reader.interfaces} - SUPPORTED_LINK_TYPES)
    _load_interfaces(con, capture_id, reader)
    _load_capture_row(con, capture_id, path, hasher.digest, size, reader, summary, labels)
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
                    target = "flows" if item.schema.names == FLOWS_SCHEMA.names else "packets"
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
    """Asks the store, on the writer thread, whether the file's hash is known."""

    def __init__(self, hasher):
        self.hasher = hasher
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

        def ask(con):
            self.found = _existing(con, h.digest)
        writer.put(ask)


def _load_packets(con, reader, capture_id, summary, hasher, size, progress):
    insert_rows = INSERT_ROWS
    table = FlowTable(jit=reader.jit)
    address_cache = {}
    status_counts = np.zeros(len(STATUS), np.int64)
    link_types = None
    pending, pending_rows = [], 0
    writer = _Writer(con)
    writer.start()
    check = _DuplicateCheck(hasher)
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


def _load_interfaces(con, capture_id, reader):
    counts = dict(con.execute(
        "SELECT interface_id, count(*) FROM packets WHERE capture_id = ? "
        "GROUP BY interface_id", [capture_id]).fetchall())
    for i in reader.interfaces:
        con.execute(
            "INSERT INTO interfaces VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [capture_id, i.interface_id, i.section, i.link_type, link_type_name(i.link_type),
             i.snaplen, i.ts_resolution, i.ts_offset_s, i.name, i.description,
             counts.get(i.interface_id, 0)])


def _load_capture_row(con, capture_id, path, digest, size, reader, summary, labels):
    first, last = con.execute(
        "SELECT min(ts_ns), max(ts_ns) FROM packets WHERE capture_id = ?",
        [capture_id]).fetchall()[0]
    stop = reader.stop
    resolutions = ",".join(dict.fromkeys(i.ts_resolution for i in reader.interfaces)) or "1e-6"
    con.execute(
        "INSERT INTO captures VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
        "MAP(?::VARCHAR[], ?::BIGINT[]), MAP(?::VARCHAR[], ?::BIGINT[]), ?, ?, ?, "
        "MAP(?::VARCHAR[], ?::VARCHAR[]), now(), ?)",
        [capture_id, os.path.abspath(path), os.path.basename(path), digest, size,
         reader.format, reader.byte_order,
         sorted({i.link_type for i in reader.interfaces}), reader.snaplen, resolutions,
         getattr(reader, "sections", 1), len(reader.interfaces), summary.packets, first, last,
         list(summary.skipped_blocks), list(summary.skipped_blocks.values()),
         list(summary.decode_status), list(summary.decode_status.values()),
         stop.reason if stop else None, stop.offset if stop else None,
         stop.message if stop else None,
         list(labels), list(labels.values()), __version__])
