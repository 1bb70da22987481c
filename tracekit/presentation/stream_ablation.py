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
link. With loss the model cannot know when each hole is repaired: the run's
measured repairs (analyses/stream_repairs.sql: when a piece that had been
missing below bytes already received reached the client -- the client's
capture for HTTP/2, its qlog for HTTP/3 -- or a piece whose first copy to
arrive was the sender's re-send, a tail loss included: the server's capture's
retransmissions, its qlog's earlier send) go in as delivery_times' holes,
mapped onto the model's streams by offset (`model_holes`); nor how long
its sender was in loss recovery: the run's recovery periods and the pace
at which the sender sent new bytes of what was queued in each
(analyses/stream_loss_response.sql: the server's capture for HTTP/2, its
qlog for HTTP/3; `_run_slowed`) slow the schedule there (link_schedule's
`slowed`, once the bottleneck has sent the gate's backlog). Everything else
-- the schedule, the link, the one-way delay -- is still the model's. A
lossy run the repair query has nothing for is predicted without holes.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import TracekitError
from ..core.multiplex import (delivery_times, drained_ahead, gated_ahead, held_chance,
                              link_schedule, on_time_seconds)
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


def predict(labels, holes=None, slowed=None):
    """The model's complete_ms, deliverable_ms and on_time_s of the audio for
    a run's labels and, with loss, the run's measured repairs (`holes`, as
    model_holes gives them) and its sender's loss recovery periods
    (`slowed`: [(start s, end s, pace bytes/s)] from the streams' ready
    time, as _run_slowed gives them; None: the lossless schedule); None for a
    lossy run without `holes` or a run missing a setting."""
    try:
        if float(labels.get("loss_down", 0)) > 0 and holes is None:
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
    # the bytes the server's gate has handed on past the round trip in flight:
    # queued at the bottleneck, ahead of a chunk under priority
    queue = gated_ahead(committed, PIECE, rate, 2 * delay)
    ahead = [queue if scheduling == "priority" else 0.0] * chunks
    periods = []
    for t0, t1, pace in slowed or ():
        for k in range(chunks):     # a recovery period drains the queue ahead of a chunk
            if t0 <= k * chunk_s < t1 and scheduling == "priority":
                ahead[k] = min(ahead[k], drained_ahead(queue, rate, pace, k * chunk_s - t0))
        # the bottleneck sends what was queued at t0 before the sender's pace shows
        start = t0 + queue / (rate - pace) if pace < rate else t1
        if start < t1:
            periods.append((start, t1, pace))
    ready = [0.0] + [k * chunk_s + ahead[k] / rate for k in range(chunks)]
    priority = None if scheduling == "fifo" else [1] + [0] * chunks
    pieces = link_schedule(sizes, ready, rate, priority, slowed=periods)
    shares = [(i, share, at) for i, share, at in holes or ()]
    holes = [(i, min(int(share * sizes[i]), sizes[i] - 1), at) for i, share, at in shares]
    complete, deliverable = delivery_times(pieces, len(sizes), delay, holes,
                                           order="connection" if protocol == "h2" else "stream")
    on_time = on_time_seconds(deliverable[1:], [play_s + k * chunk_s for k in range(chunks)], chunk_s)
    out = {"complete_ms": float(np.max(complete[1:])) * 1e3,
           "deliverable_ms": float(np.max(deliverable[1:])) * 1e3, "on_time_s": on_time}
    out["held_chance"] = _held_chance(pieces, shares, float(np.max(complete[1:])), image,
                                      sizes[0]) if protocol == "h2" else 0.0
    return out


def _held_chance(pieces, shares, audio_complete, image, size):
    """The chance the audio is held behind an image hole in the connection's
    order (held_chance): the image's bytes before the audio's last piece in
    the model's schedule (of `size` model bytes for `image` bytes) against
    the lowest image hole (model_holes' shares) repaired after the audio was
    complete; 0 without one."""
    last = max((k for k, p in enumerate(pieces) if p.stream > 0), default=None)
    late = [share for i, share, at in shares if i == 0 and at > audio_complete]
    if last is None or not late:
        return 0.0
    ahead = sum(p.size for p in pieces[:last] if p.stream == 0) * image / size
    return held_chance(ahead, round(min(late) * image), PIECE)


def model_holes(repairs, image, audio, chunks):
    """The measured repairs of one run (stream_repairs rows as dicts) as
    (model stream, share of its bytes, repaired_at s) for `predict`: the
    image's bytes are model stream 0, the audio's chunk k stream 1 + k (by
    the share of the audio's bytes; a repair spanning chunks holds each);
    repaired_at from the stream's ready_ns, where the model's time 0 is.
    A piece spanning several model pieces is held at every 256th byte."""
    out = []
    for r in repairs:
        at = (r["repaired_ns"] - r["ready_ns"]) / 1e9
        lo, hi = r["offset"] / r["bytes"], (r["offset"] + r["length"] - 1) / r["bytes"]
        if r["stream_id"] == image:
            step = 256 / r["bytes"]
            out += [(0, lo + k * step, at) for k in range(int((hi - lo) / step) + 1)] + [(0, hi, at)]
        elif r["stream_id"] == audio:
            out += [(1 + k, 0.0, at) for k in range(min(int(lo * chunks), chunks - 1),
                                                    min(int(hi * chunks), chunks - 1) + 1)]
    return out


def _run_holes(con, rows):
    """{connection: model holes} of the lossy runs among `rows` (every
    labelled stream, image and audio), from their measured repairs."""
    lossy = {r["connection"] for r in rows if float(dict(r["labels"]).get("loss_down", 0) or 0) > 0}
    if not lossy:
        return {}
    columns, found = run_analysis(con, "stream_repairs")
    repairs = {}
    for r in found:
        r = dict(zip(columns, r))
        repairs.setdefault(r["connection"], []).append(r)
    out = {}
    for c in lossy:
        streams = [r for r in rows if r["connection"] == c]
        audio = [r for r in streams if r["media"]]
        image = [r for r in streams if not r["media"]]
        if len(audio) == 1 and len(image) == 1:
            out[c] = model_holes(repairs.get(c, []), image[0]["stream_id"], audio[0]["stream_id"],
                                 audio[0]["chunks"])
    return out


def _run_slowed(con, rows):
    """{connection: [(start s, end s, pace bytes/s)]} of the lossy runs among
    `rows` (image and audio streams, labelled): the sender's loss recovery
    periods from the streams' ready time (the model's time 0) and the pace
    at which it sent new bytes of what was queued during each -- the image's
    under priority, every stream's under FIFO
    (analyses/stream_loss_response.sql)."""
    lossy = {r["connection"]: dict(r["labels"]).get("scheduling") for r in rows
             if float(dict(r["labels"]).get("loss_down", 0) or 0) > 0}
    if not lossy:
        return {}
    image = {(r["connection"], r["stream_id"]) for r in rows if not r["media"]}
    columns, found = run_analysis(con, "stream_loss_response")
    periods = {}
    for r in found:
        r = dict(zip(columns, r))
        c = r["connection"]
        if c not in lossy or (lossy[c] == "priority" and (c, r["stream_id"]) not in image):
            continue
        key = (r["period"], r["ready_ns"], r["start_ns"], r["end_ns"])
        got = periods.setdefault(c, {}).setdefault(key, [0, 0])
        got[0] += r["new_bytes"]
        got[1] = max(got[1], r["last_ns"])
    out = {}
    for c, p in periods.items():
        for (_, ready, s, e), (new_bytes, last) in sorted(p.items()):
            e = min(e, last)    # a sender with nothing left to send is not slowed
            if e > s:
                out.setdefault(c, []).append(((s - ready) / 1e9, (e - ready) / 1e9,
                                              new_bytes * 1e9 / (e - s)))
    return out


def stream_ablation(con, by=("protocol", "scheduling"), where=None, media=True):
    """[Cell], one per combination of the `by` labels, over the streams whose
    run's labels match `where` ({label: value}); `media`: the streams with
    timed chunks only (the audio), else every stream."""
    where = where or {}
    columns, rows = run_analysis(con, "stream_ablation", by=list(by), where_keys=list(where),
                                 where_values=[str(v) for v in where.values()])
    every = [dict(zip(columns, r)) for r in rows]
    holes = _run_holes(con, every) if media else {}
    slowed = _run_slowed(con, every) if media else {}
    rows = [r for r in every if not media or r["media"]]
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
        predictions = [p for p in (predict(dict(r["labels"]), holes.get(r["connection"]),
                                                   slowed.get(r["connection"]))
                                   for r in group) if p] if media else []
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
