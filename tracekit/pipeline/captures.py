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

import os
import time
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import TracekitError
from ..core.jit import preload, prefer_compiled
from ..core.version import __version__
from ..readers.capture import open_capture
from ..readers.capture.base import DEFAULT_BATCH_PACKETS, DEFAULT_CHUNK_BYTES
from ..readers.decode.addresses import address_dictionary
from ..readers.decode.flows import FlowTable
from ..readers.decode.link import SUPPORTED_LINK_TYPES, link_type_name
from ..readers.decode.payloads import PayloadKeeper
from ..readers.decode.status import CODE, STATUS
from ..readers.preload import INGEST_KERNELS, load_kernels
from ..store.arrow import flow_columns, packet_columns
from ..store.db import settings
from ..store.recovery import recover_ingests
from ..store.writer import ROW_GROUP
from .reading import decoded_batches, file_size, open_file, prefetch, small_file_groups
from .spool import STDIN, stream_stop_error
from .staging import Command, Hasher, Run, command

__all__ = ["CaptureSummary", "Command", "command", "load_captures"]
INGEST_MEMORY_LIMIT = "288MB"  # DuckDB's share while ingesting: peak RSS stays under 1 GiB
LARGE_TABLE, SMALL_BATCH = 1 << 16, 1 << 14  # flows live; packets a batch then
FLOW_PART = 1 << 16  # flows written at a time at the end of a capture
FIRST_BATCH = ROW_GROUP  # packets decoded first: the writer's first append (Run's writer)


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


def load_captures(con, paths, labels=None, replace=False, progress=None,
                  batch_packets=DEFAULT_BATCH_PACKETS, chunk_bytes=DEFAULT_CHUNK_BYTES,
                  command=None, first_capture_id=None, names=None):
    """Ingest capture files, all or nothing; return one CaptureSummary each.

    `labels` is a dict for every file, or a list of dicts, one per path.
    `progress(path, done_bytes, total_bytes)` is called after every batch.
    With `command` (a Command) the captures become visible when it commits.
    `first_capture_id` numbers them from there instead of after the store's
    last (a dataset's task: the coordinator has chosen the id). `names` maps
    a spooled stream's file to the stream's name (pipeline/spool.py): messages
    and `captures` say that name, and the stream is refused if it ends cut short.
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
                         batch_packets, chunk_bytes, command, first_capture_id, names or {})


def _load_all(con, paths, labels, replace, progress, batch_packets, chunk_bytes, command,
              first_capture_id, names):
    per_path = iter(labels if isinstance(labels, list) else [labels or {}] * len(paths))
    run = None
    try:
        if command is None:  # (a command's earlier calls have markers that are not orphans)
            recover_ingests(con)
        # many small files together pay the compiled scanners' start-up once
        prefer_compiled(sum(file_size(p) or 0 for p in paths))
        # (unless gather started it: loaded beside what comes first)
        preload(load_kernels, paths, kernels=INGEST_KERNELS)
        run = Run(con, paths, command.digests if command else None, first_capture_id)
        summaries = []
        for group in small_file_groups(paths, chunk_bytes):
            # small files are read ahead and decoded together: one decode of
            # many packets costs little more than one of a few
            prepared = (prefetch(group, chunk_bytes, batch_packets, names) if len(group) > 1
                        else [None])
            try:
                summaries += [_load_one(run, path, next(per_path), replace, progress,
                                        batch_packets, chunk_bytes, ahead, names.get(path))
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


def _load_one(run, path, labels, replace, progress, batch_packets, chunk_bytes, prepared=None,
              stream=None):
    """One file; `prepared` is what `prefetch` read and decoded of it, if anything;
    `stream` the name of the stream it was spooled from."""
    started = time.perf_counter()
    shown = stream or path
    summary = CaptureSummary(path=stream or os.path.abspath(path))
    if prepared is None:
        fileobj, size = open_file(path)
        reader, decoded = None, None
    else:
        fileobj, size, reader, decoded = prepared
    with fileobj:
        if reader is None:
            reader = open_capture(shown, fileobj, chunk_bytes, batch_packets)
        hasher = Hasher(path, size)
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
            raise TracekitError(f"{shown}: cannot read: {hasher.error}")
    if stream and reader.stop:
        raise stream_stop_error(stream, reader.stop)
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
        _capture_row(capture_id, path, hasher.digest, size, reader, summary, labels, totals,
                     stream),
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
    for batch, link_type, cols in (decoded_batches(reader, _batch_sizes(table)) if decoded is None
                                   else decoded):
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
        kept = keeper.batch(capture_id, batch, cols, table.rows, from_client)
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
            # flows that are over leave the table, their rows written now
            over = table.evict(last_ts, batch.first_frame + len(batch) - 1)
            if over is not None:
                keeper.moved(table.moved)
                run.put_rows("flows", flow_columns(capture_id, over, address_cache), len(over))
        summary.packets += len(batch)
        check.poll()
        if check.found is not None:
            break
        if progress:
            progress(summary.path, int(batch.file_offset[-1]), size)
    check.poll(wait=True)
    if check.found is not None:
        raise _Duplicate(check.found)
    summary.flows = table.next_flow_id
    rows = table.flows()
    del keeper
    # the flows still live, a part at a time: their columns cost more than their rows
    for begin in range(0, len(rows), FLOW_PART):
        part = rows.part(begin, begin + FLOW_PART)
        run.put_rows("flows", flow_columns(capture_id, part, address_cache), len(part))
    summary.decode_status = {STATUS[i]: int(c) for i, c in enumerate(status_counts)
                             if i and c}
    return {"per_interface": per_interface, "first_ts_ns": first_ts, "last_ts_ns": last_ts}


def _batch_sizes(table):
    """`most()` for decoded_batches: smaller batches while the flow table is
    large (memory for both stays bounded); the first at most one row group, written
    while the next is decoded (a capture of 200 k packets was decoded whole,
    then written whole)."""
    sizes = iter([min(FIRST_BATCH, DEFAULT_BATCH_PACKETS)])

    def most():
        return SMALL_BATCH if table.live() > LARGE_TABLE else next(sizes, DEFAULT_BATCH_PACKETS)
    return most


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


def _capture_row(capture_id, path, digest, size, reader, summary, labels, totals, stream=None):
    """The `captures` row of a file, by column (maps as (keys, values)); a stream's
    (`stream`: its name) is named after it and its hash: `<stdin>`, stdin-1a2b3c4d5e6f.pcap."""
    stop = reader.stop
    if stream:
        stem = "stdin" if stream == STDIN else os.path.basename(stream)
        file_name = f"{stem}-{digest[:12]}.{reader.format}"
    else:
        path, file_name = os.path.abspath(path), os.path.basename(path)
    resolutions = ",".join(dict.fromkeys(i.ts_resolution for i in reader.interfaces)) or "1e-6"
    return {
        "capture_id": capture_id, "path": stream or path,
        "file_name": file_name, "sha256": digest, "size_bytes": size,
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
