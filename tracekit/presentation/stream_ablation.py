"""The stream-level ablation (issue #27): per cell of the `--by` factors
(protocol x scheduling of experiments/multiplexing.toml), the timed-media
streams' completion, deliverable time, the client's read, head-of-line and
queueing time and on-time seconds -- each the median over the cell's runs
with a bootstrap 95 % interval of the median (presentation/ablation.py's,
2,000 resamples, seeded) -- and beside them what tracekit.core.multiplex
predicts for the cell's settings (`predict`).

The prediction is a closed form, not a fit: the link's rate in the
protocol's payload bytes (the run's bottleneck_mbps label times the bytes a
full packet carries, PAYLOAD), the image in 4,096-byte pieces and each 960-byte
chunk as its own message ready at k x chunk_ms, FIFO or audio first; with
priority a chunk leaves the bottleneck behind the image bytes the lab
server's gate had handed on (`committed` plus half a piece on average) less
those already past the bottleneck waiting only for their ACK (the rate times
a round trip); each piece arrives one way (rtt_ms / 2) after it left the
link. Lossy cells get
none: the model takes loss-recovery times as input, and the lab does not
know them before the run.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import TracekitError
from ..core.multiplex import delivery_times, gated_ahead, link_schedule, on_time_seconds
from ..pipeline.runner import run_analysis
from .ablation import bootstrap_median_ci

MEASURES = ("complete_ms", "deliverable_ms", "read_ms", "hol_blocking_ms", "stream_queueing_ms",
            "on_time_s")
PIECE = 4096
CHUNK = 960
# (bytes of stream data a full packet carries, the packet's IP bytes, the
# bytes each piece adds in the protocol's own framing)
PAYLOAD = {
    # TCP MSS with timestamps in a 1,500-byte packet; an HTTP/2 DATA frame
    # header (9) and a TLS 1.3 record's header, content type and tag (22)
    "h2": (1448, 1500, 31),
    # aioquic's 1,200-byte UDP datagrams (IP 1,228): short header with an
    # 8-byte connection id and 2-byte packet number (11), AEAD tag (16), a
    # STREAM frame's header (6); an HTTP/3 DATA frame header (3)
    "h3": (1200 - 11 - 16 - 6, 1228, 3),
}


@dataclass
class Cell:
    by: tuple
    rows: list
    medians: dict = field(default_factory=dict)   # measure -> (median, ci low, ci high)
    predicted: dict | None = None                 # measure -> model value

    @property
    def n(self):
        return len(self.rows)


def predict(labels):
    """The model's complete_ms, deliverable_ms and on_time_s of the audio for
    a run's labels; None for a lossy run or one missing a setting."""
    try:
        if float(labels.get("loss_down", 0)) > 0:
            return None
        protocol, scheduling = labels["protocol"], labels["scheduling"]
        payload, packet, framing = PAYLOAD[protocol]
        rate = float(labels["bottleneck_mbps"]) * 1e6 / 8 * payload / packet
        image, chunks = int(labels["image_bytes"]), int(labels["chunks"])
        chunk_s, play_s = float(labels["chunk_ms"]) / 1e3, float(labels["play_ms"]) / 1e3
        committed = int(labels.get("committed", 0))
        delay = float(labels["rtt_ms"]) / 2e3
    except (KeyError, ValueError):
        return None
    sizes = [image + math.ceil(image / PIECE) * framing] + [CHUNK + framing] * chunks
    # with priority a chunk is handed on at once, behind what the server's gate holds
    ahead = gated_ahead(committed, PIECE, rate, 2 * delay) if scheduling == "priority" else 0.0
    ready = [0.0] + [k * chunk_s + ahead / rate for k in range(chunks)]
    priority = None if scheduling == "fifo" else [1] + [0] * chunks
    pieces = link_schedule(sizes, ready, rate, priority)
    complete, deliverable = delivery_times(pieces, len(sizes), delay,
                                           order="connection" if protocol == "h2" else "stream")
    on_time = on_time_seconds(deliverable[1:], [play_s + k * chunk_s for k in range(chunks)], chunk_s)
    return {"complete_ms": float(np.max(complete[1:])) * 1e3,
            "deliverable_ms": float(np.max(deliverable[1:])) * 1e3, "on_time_s": on_time}


def stream_ablation(con, by=("protocol", "scheduling"), where=None, media=True):
    """[Cell], one per combination of the `by` labels, over the streams whose
    run's labels match `where` ({label: value}); `media`: the streams with
    timed chunks only (the audio), else every stream."""
    where = where or {}
    columns, rows = run_analysis(con, "stream_ablation", by=list(by), where_keys=list(where),
                                 where_values=[str(v) for v in where.values()])
    rows = [dict(zip(columns, r)) for r in rows if not media or r[columns.index("media")]]
    if not rows:
        raise TracekitError("no stream of a labelled run matches (a lab run's logs carry its "
                            "labels: tracekit lab run, or ingest with --label; then tracekit "
                            "analyze)" + (f" with {where}" if where else ""))
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r["by_levels"]), []).append(r)
    out = []
    for key, group in sorted(groups.items()):
        cell = Cell(key, group)
        for m in MEASURES:
            values = [r[m] for r in group if r[m] is not None]
            if values:
                lo, hi = bootstrap_median_ci(values)
                cell.medians[m] = (float(np.median(values)), lo, hi)
        predictions = [p for p in (predict(dict(r["labels"])) for r in group) if p] if media else []
        if predictions and len(predictions) == len(group):   # the model's values are the audio's
            cell.predicted = {k: float(np.median([p[k] for p in predictions])) for k in predictions[0]}
        out.append(cell)
    return out


def within(measured, predicted, share=0.10):
    """Whether the model's value is within `share` of the measured one."""
    return abs(predicted - measured) <= share * abs(measured)


def table_rows(cells, by):
    """(columns, rows) of the table: per cell, median [95 % interval] of each
    measure and the model's value beside it (tracekit stream-ablation)."""
    columns = ["cell", "n", "complete (ms)", "model", "deliverable (ms)", "model",
               "client read (ms)", "hol_blocking (ms)", "stream_queueing (ms)", "on time (s)",
               "model"]

    def fmt(cell, m, digits=1):
        if m not in cell.medians:
            return "-"
        v, lo, hi = cell.medians[m]
        return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"

    def model(cell, m, digits=1):
        return f"{cell.predicted[m]:.{digits}f}" if cell.predicted else "-"

    rows = [[", ".join(f"{f}={v}" for f, v in zip(by, c.by)), c.n,
             fmt(c, "complete_ms"), model(c, "complete_ms"), fmt(c, "deliverable_ms"),
             model(c, "deliverable_ms"), fmt(c, "read_ms"), fmt(c, "hol_blocking_ms"),
             fmt(c, "stream_queueing_ms"), fmt(c, "on_time_s", 2), model(c, "on_time_s", 2)]
            for c in cells]
    return columns, rows
