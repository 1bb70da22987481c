"""Charts of what the application saw (Altair): the playback buffer with its
underruns, a stream's chunk timeline, and serving throughput/TPOT against
batch size. Time is in seconds from the stream's first chunk arrival.
"""

from ..core.errors import TracekitError
from .charts import _alt

STAGE_COLORS = {"generated": "#9d755d", "sent": "#f58518", "host_arrived": "#72b7b2",
                "arrived": "#4c78a8", "played": "#54a24b", "predicted_play": "#bab0ac"}
CAUSE_COLORS = {"model": "#b279a2", "transport": "#e45756", "local": "#f58518"}


def _stream(con, stream):
    streams = [r[0] for r in con.execute(
        "SELECT DISTINCT stream FROM playback ORDER BY 1").fetchall()]
    if not streams:
        raise TracekitError("no audio streams in the store (chunk_arrived events with a stream)")
    if stream is None:
        if len(streams) != 1:
            raise TracekitError(f"the store holds {len(streams)} streams; choose one with "
                                f"--stream (e.g. {streams[0]})")
        stream = streams[0]
    if stream not in streams:
        raise TracekitError(f"no stream {stream!r}; known: {', '.join(streams[:10])}")
    t0 = con.execute("SELECT min(arrived_ns) FROM playback WHERE stream = ?", [stream]).fetchall()[0][0]
    return stream, t0


def playback_buffer(con, stream=None):
    """Unplayed audio over time; underrun stretches shaded by their cause."""
    alt = _alt()
    stream, t0 = _stream(con, stream)
    level = con.execute("""
        SELECT (ts_ns - ?) / 1e9 AS t, level_ns / 1e6 AS level_ms, event
        FROM playback_buffer WHERE stream = ? ORDER BY ts_ns""", [t0, stream]).df()
    under = con.execute("""
        SELECT (onset_ns - ?) / 1e9 - 0.02 AS t, (end_ns - ?) / 1e9 AS t_end, cause,
               silence_ns / 1e6 AS silence_ms, next_seq
        FROM underruns WHERE stream = ?""", [t0, t0, stream]).df()
    x = alt.X("t:Q", title="time since the first chunk arrived (s)")
    line = alt.Chart(level).mark_line(interpolate="step-after").encode(
        x=x, y=alt.Y("level_ms:Q", title="unplayed audio in the buffer (ms)"))
    layers = [line]
    if len(under):
        scale = alt.Scale(domain=list(CAUSE_COLORS), range=list(CAUSE_COLORS.values()))
        layers.insert(0, alt.Chart(under).mark_rect(opacity=0.35).encode(
            x="t:Q", x2="t_end:Q", color=alt.Color("cause:N", scale=scale, title="underrun cause"),
            tooltip=["cause", "silence_ms", "next_seq"]))
    return alt.layer(*layers).properties(
        width=900, height=320, title=f"Playback buffer of stream {stream}; shaded: underruns")


def chunk_timeline(con, stream=None):
    """Each chunk's generated / sent / host arrival / app arrival / played times."""
    alt = _alt()
    stream, t0 = _stream(con, stream)
    rows = con.execute("""
        UNPIVOT (SELECT seq, (generated_ns - $t0) / 1e9 AS generated, (sent_ns - $t0) / 1e9 AS sent,
                        (host_arrived_ns - $t0) / 1e9 AS host_arrived, (arrived_ns - $t0) / 1e9 AS arrived,
                        (played_ns - $t0) / 1e9 AS played,
                        (predicted_play_ns - $t0) / 1e9 AS predicted_play
                 FROM playback WHERE stream = $stream)
        ON generated, sent, host_arrived, arrived, played, predicted_play
        INTO NAME stage VALUE t""", {"t0": t0, "stream": stream}).df()
    scale = alt.Scale(domain=list(STAGE_COLORS), range=list(STAGE_COLORS.values()))
    return alt.Chart(rows).mark_point(size=14, filled=True).encode(
        x=alt.X("t:Q", title="time since the first chunk arrived (s)"),
        y=alt.Y("seq:Q", title="chunk"),
        color=alt.Color("stage:N", scale=scale, sort=list(STAGE_COLORS), title="stage"),
        tooltip=["seq", "stage", "t"],
    ).properties(width=900, height=420, title=f"Chunk timeline of stream {stream}")


def serving(con, run=None):
    """Throughput and TPOT against batch size."""
    alt = _alt()
    from ..pipeline.runner import run_analysis
    columns, rows = run_analysis(con, "views/serving", run=run)
    if not rows:
        raise TracekitError("no serving batches in the store (token events with a batch)")
    import pandas as pd
    df = pd.DataFrame(rows, columns=columns)
    base = alt.Chart(df).encode(x=alt.X("batch_size:O", title="batch size"))
    tput = base.mark_bar(color="#4c78a8", opacity=0.7).encode(
        y=alt.Y("throughput_tps:Q", title="throughput (tokens/s)"),
        tooltip=["batch_size", "throughput_tps", "slot_waste"])
    tpot = base.mark_line(color="#e45756", point=True).encode(
        y=alt.Y("tpot_ms:Q", title="time per output token (ms)"),
        tooltip=["batch_size", "tpot_ms", "ttft_ms"])
    return alt.layer(tput, tpot).resolve_scale(y="independent").properties(
        width=600, height=320, title="Serving: throughput (bars) and TPOT (line) by batch size")
