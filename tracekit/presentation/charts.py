"""Charts of one flow (Altair): time-sequence graph with its limitation ribbon,
bytes in flight with the flight ceilings, RTT samples.

Each function returns an Altair chart built from the derived tables; `save`
writes it as a self-contained HTML file (the Vega libraries inlined: it works
offline) and as PNG. Time is in seconds from the flow's first packet, sequence
numbers are relative to the sender's ISN, as in Wireshark's Stevens graph.
"""

from ..core.errors import TracekitError
from ..core.spans import STATE_COLORS

WIDTH = 900  # px of the plot area: the aggregates' pixel columns
DETAIL = 4000  # rows a layer draws as they are; above it, per-pixel aggregates
KINDS = ("time-sequence", "inflight", "rtt")
SEGMENT_COLORS = {"new": "#4c78a8", "repeat": "#e45756", "hole_fill": "#f58518",
                  "reordered": "#72b7b2", "duplicate": "#b279a2"}


def _alt():
    from .page import require_chart_modules
    require_chart_modules()
    import altair as alt
    alt.data_transformers.disable_max_rows()  # every chart here bounds its rows (decimate)
    return alt


def _flow(con, capture_id, flow_id):
    rows = con.execute("SELECT first_ts_ns, client_addr, client_port, server_addr, server_port, "
                       "protocol FROM flows WHERE capture_id = ? AND flow_id = ?",
                       [capture_id, flow_id]).fetchall()
    if not rows:
        raise TracekitError(f"no flow {flow_id} in capture {capture_id} (see tracekit sessions)")
    t0, ca, cp, sa, sp, protocol = rows[0]
    if protocol != "tcp":
        raise TracekitError(f"flow {flow_id} of capture {capture_id} is {protocol.upper()}; "
                            f"the charts draw TCP flows")
    return t0, (f"{ca}:{cp}", f"{sa}:{sp}")


def _data_title(ends, direction):
    """The direction the data goes: s2c is from the server to the client."""
    client, server = ends
    return f"{server} -> {client}" if direction == "s2c" else f"{client} -> {server}"


def _window(con, capture_id, flow_id, t0, t_from, t_to):
    """(lo, hi) seconds of the stretch to draw: --from/--to, else the whole flow."""
    (last,), = con.execute("SELECT (max(ts_ns) - ?) / 1e9 FROM tcp_analysis WHERE capture_id = ? "
                           "AND flow_id = ?", [t0, capture_id, flow_id]).fetchall()
    lo = 0.0 if t_from is None else float(t_from)
    hi = float(last or 0.0) if t_to is None else float(t_to)
    if hi <= lo:
        raise TracekitError(f"--to ({hi:g} s) must come after --from ({lo:g} s)")
    return lo, hi


def decimate(df, value, lo, hi, width=WIDTH, by=None):
    """At most two rows per pixel column (and per `by` group): those with the
    smallest and the largest `value` -- the per-pixel min/max that keeps
    every peak and dip a full-detail line would show. Small frames unchanged."""
    if len(df) <= DETAIL:
        return df
    pixel = ((df["t"] - lo) / (hi - lo) * width).clip(0, width - 1).astype("int64")
    keys = [pixel] + ([df[by]] if by else [])
    g = df[value].groupby(keys)
    keep = sorted(set(g.idxmin().dropna()) | set(g.idxmax().dropna()))
    return df.loc[keep].sort_values("t")


def sender_filter(sender, receiver):
    """The Wireshark display filter of the segments from SENDER ("addr:port") to
    RECEIVER that take sequence space (payload, SYN or FIN: tcp_analysis's
    segments), IPv4 or IPv6; words, not `&&`/`>`, so it stays short in a page."""
    (sa, sp), (ra, rp) = (e.rsplit(":", 1) for e in (sender, receiver))
    ip = "ipv6" if ":" in sa else "ip"
    return (f"{ip}.src == {sa} and tcp.srcport == {sp} and {ip}.dst == {ra} and "
            f"tcp.dstport == {rp} and (tcp.len gt 0 or tcp.flags.syn == 1 or tcp.flags.fin == 1)")


def wireshark_expression(sender_filter):
    """The Vega expression of a rule's tooltip filter: its frames (A or A-B) as
    `frame.number in {A..B}` and the sender's filter, made in the browser so
    the page carries the filter once per chart, not once per row."""
    return f"'frame.number in {{' + replace(datum.frames, '-', '..') + '}} and {sender_filter}'"


def _segments(df, lo, hi, width=WIDTH):
    """Segments, or above DETAIL of them one rule per pixel column and class from
    the lowest sequence number to the highest end, with its frame range
    `frames` (A, or A-B where a pixel aggregates: the rule's segments and the
    other classes' segments between them)."""
    if len(df) > DETAIL:
        pixel = ((df["t"] - lo) / (hi - lo) * width).clip(0, width - 1).astype("int64")
        df = (df.assign(pixel=pixel).groupby(["pixel", "segment"], as_index=False)
              .agg(t=("t", "min"), seq=("seq", "min"), seq_end=("seq_end", "max"),
                   segments=("seq", "size"), frame=("frame", "min"), last_frame=("frame", "max"))
              .drop(columns="pixel"))
    else:
        df = df.assign(segments=1, last_frame=df["frame"])
    first, last = df["frame"].astype("int64").astype(str), df["last_frame"].astype("int64")
    return df.assign(frames=first.where(df["frame"] == last, first + "-" + last.astype(str)))


def _sequence_rows(con, capture_id, flow_id, direction, t0, lo, hi):
    """(segments, ACKs, SACK blocks, states) of the time-sequence graph over [lo, hi] s,
    the segments, SACKs and states already aggregated when long."""
    p = {"t0": t0, "c": capture_id, "f": flow_id, "fc": direction == "c2s", "lo": lo, "hi": hi}
    inside = "(ts_ns - $t0) / 1e9 BETWEEN $lo AND $hi"
    segs = _segments(con.execute(f"""
        SELECT (ts_ns - $t0) / 1e9 AS t, rel_seq AS seq, rel_end AS seq_end, segment, frame
        FROM tcp_analysis WHERE capture_id = $c AND flow_id = $f AND from_client = $fc
          AND segment IS NOT NULL AND {inside} ORDER BY frame""", p).df(), lo, hi)
    acks = con.execute(f"""
        SELECT (t.ts_ns - $t0) / 1e9 AS t, t.rel_ack AS ack,
               t.rel_ack + p.tcp_window_bytes AS window_edge, t.frame
        FROM tcp_analysis t JOIN packets p USING (capture_id, frame)
        WHERE t.capture_id = $c AND t.flow_id = $f AND t.from_client <> $fc
          AND t.rel_ack IS NOT NULL AND {inside.replace('ts_ns', 't.ts_ns')}
        ORDER BY t.frame""", p).df()
    sacks = decimate(con.execute(f"""
        SELECT (t.ts_ns - $t0) / 1e9 AS t,
               -- each edge: the relative number nearest the ACK's (RFC 1982)
               t.rel_ack + (unnest(p.tcp_sack_left)::BIGINT - p.tcp_ack::BIGINT
                            + 6442450944) % 4294967296 - 2147483648 AS lo,
               t.rel_ack + (unnest(p.tcp_sack_right)::BIGINT - p.tcp_ack::BIGINT
                            + 6442450944) % 4294967296 - 2147483648 AS hi, t.frame
        FROM tcp_analysis t JOIN packets p USING (capture_id, frame)
        WHERE t.capture_id = $c AND t.flow_id = $f AND t.from_client <> $fc
          AND p.tcp_sack_left IS NOT NULL AND {inside.replace('ts_ns', 't.ts_ns')}""", p).df(),
                     "hi", lo, hi)
    states = con.execute("""
        SELECT greatest((start_ns - $t0) / 1e9, $lo) AS t, least((end_ns - $t0) / 1e9, $hi) AS t_end,
               state
        FROM stalls WHERE capture_id = $c AND flow_id = $f AND direction = $d
          AND (end_ns - $t0) / 1e9 >= $lo AND (start_ns - $t0) / 1e9 <= $hi ORDER BY start_ns""",
                         {**{k: p[k] for k in ("t0", "c", "f", "lo", "hi")}, "d": direction}).df()
    states = decimate(states.assign(length=states["t_end"] - states["t"]), "length", lo, hi)
    return segs, acks, sacks, states


def time_sequence(con, capture_id, flow_id, direction="s2c", t_from=None, t_to=None):
    """Segments as bars from seq to end, ACK and receive-window lines, SACK
    blocks, and under it, on the same time axis, a ribbon of the limitation
    states. A long flow is drawn from per-pixel aggregates (decimate,
    _segments); --from/--to (t_from, t_to) narrow it down to full detail."""
    alt = _alt()
    import pandas as pd
    t0, ends = _flow(con, capture_id, flow_id)
    lo, hi = _window(con, capture_id, flow_id, t0, t_from, t_to)
    title = _data_title(ends, direction)
    segs, acks, sacks, states = _sequence_rows(con, capture_id, flow_id, direction, t0, lo, hi)
    x = alt.X("t:Q", title="time since the flow's first packet (s)",
              scale=alt.Scale(domain=[lo, hi], nice=False, zero=False))
    colors = alt.Scale(domain=list(SEGMENT_COLORS), range=list(SEGMENT_COLORS.values()))
    tip = ["t:Q", "seq:Q", "seq_end:Q", "segment:N", "segments:Q",
           alt.Tooltip("frames:N", title="frames"),
           alt.Tooltip("wireshark:N", title="Wireshark display filter")]
    wireshark = wireshark_expression(sender_filter(*(ends[::-1] if direction == "s2c" else ends)))
    bars = alt.Chart(segs).transform_calculate(wireshark=wireshark).mark_rule(
        strokeWidth=2, clip=True).encode(
        x=x, y=alt.Y("seq:Q", title=f"relative sequence number ({direction})",
                           scale=alt.Scale(zero=False)), y2="seq_end:Q",
        color=alt.Color("segment:N", scale=colors, title="segment",
                        legend=alt.Legend(labelLimit=0)), tooltip=tip)
    ack_name, window_name, sack_name = ("ACK (cumulative, from the receiver)",
                                        "receive window edge (ACK + window)",
                                        "SACK block (received above a hole)")
    lines = pd.concat([decimate(acks.rename(columns={"ack": "y"}), "y", lo, hi)
                       .assign(line=ack_name)[["t", "y", "line", "frame"]],
                       decimate(acks.rename(columns={"window_edge": "y"}), "y", lo, hi)
                       .assign(line=window_name)[["t", "y", "line", "frame"]]])
    line_scale = alt.Scale(domain=[ack_name, window_name, sack_name],
                           range=["#54a24b", "#bab0ac", "#9d755d"])
    line_color = alt.Color("line:N", title="receiver", scale=line_scale,
                           legend=alt.Legend(labelLimit=0))
    receiver = alt.Chart(lines).mark_line(interpolate="step-after", clip=True).encode(
        x=x, y="y:Q", color=line_color, detail="line:N", tooltip=["t:Q", "y:Q", "line:N", "frame:Q"],
        strokeDash=alt.condition(f"datum.line == '{window_name}'", alt.value([4, 2]),
                                 alt.value([1, 0])))
    resent = alt.Chart(segs[segs.segment != "new"]).transform_calculate(
        wireshark=wireshark).mark_point(size=40, filled=True, clip=True).encode(
        x=x, y="seq:Q", color=alt.Color("segment:N", scale=colors, legend=None), tooltip=tip)
    layers = [receiver, bars, resent]
    if len(sacks):
        layers.append(alt.Chart(sacks.assign(line=sack_name)).mark_rule(
            strokeWidth=4, opacity=0.6, clip=True).encode(
                x=x, y="lo:Q", y2="hi:Q", color=alt.Color("line:N", scale=line_scale, legend=None)))
    top = alt.layer(*layers).resolve_scale(color="independent").properties(
        width=WIDTH, height=420, title=f"Time-sequence graph: data {title}")
    ribbon = alt.Chart(states).mark_rect(clip=True).encode(
        x=x, x2="t_end:Q", tooltip=["state:N", "t:Q", "t_end:Q"],
        color=alt.Color("state:N", title="limitation state", scale=alt.Scale(
            domain=list(STATE_COLORS), range=list(STATE_COLORS.values())))
    ).properties(width=WIDTH, height=36)
    return alt.vconcat(top, ribbon).resolve_scale(color="independent", x="shared")


def inflight(con, capture_id, flow_id, direction="s2c", t_from=None, t_to=None):
    """Bytes in flight (tracekit's SACK-aware and Wireshark's) with each flight's
    ceiling; per-pixel min/max above DETAIL samples."""
    alt = _alt()
    t0, ends = _flow(con, capture_id, flow_id)
    lo, hi = _window(con, capture_id, flow_id, t0, t_from, t_to)
    title = _data_title(ends, direction)
    series = con.execute("""
        SELECT (ts_ns - ?) / 1e9 AS t, inflight_bytes, wireshark_bytes
        FROM inflight WHERE capture_id = ? AND flow_id = ? AND direction = ?
        ORDER BY frame""", [t0, capture_id, flow_id, direction]).df()
    series = decimate(series[series.t.between(lo, hi)].reset_index(drop=True), "inflight_bytes",
                      lo, hi)
    flights = con.execute("""
        SELECT (start_ns - ?) / 1e9 AS t, (coalesce(start_ns + duration_ns, end_ns) - ?) / 1e9
               AS t_end, peak_inflight_bytes, flight
        FROM flights WHERE capture_id = ? AND flow_id = ? AND direction = ?""",
                          [t0, t0, capture_id, flow_id, direction]).df()
    flights = flights[(flights.t_end >= lo) & (flights.t <= hi)]
    x = alt.X("t:Q", title="time since the flow's first packet (s)",
              scale=alt.Scale(domain=[lo, hi], nice=False, zero=False))
    line = alt.Chart(series).mark_line(interpolate="step-after").encode(
        x=x, y=alt.Y("inflight_bytes:Q", title="bytes in flight"))
    ws = alt.Chart(series).mark_point(size=12, color="#e45756").encode(
        x="t:Q", y="wireshark_bytes:Q", tooltip=["t", "wireshark_bytes"])
    ceilings = alt.Chart(flights).mark_rule(color="#f58518", strokeWidth=2).encode(
        x="t:Q", x2="t_end:Q", y="peak_inflight_bytes:Q", tooltip=["flight", "peak_inflight_bytes"])
    return alt.layer(line, ws, ceilings).properties(
        width=900, height=360,
        title=f"Bytes in flight, data {title}: line tracekit, dots Wireshark, "
              f"bars flight ceilings")


def rtt(con, capture_id, flow_id, direction=None, t_from=None, t_to=None):
    """RTT samples over time, by kind; per-pixel min/max above DETAIL samples."""
    alt = _alt()
    t0, ends = _flow(con, capture_id, flow_id)
    lo, hi = _window(con, capture_id, flow_id, t0, t_from, t_to)
    title = f"{ends[0]} <-> {ends[1]}"
    samples = con.execute("""
        SELECT (ts_ns - ?) / 1e9 AS t, rtt_ns / 1e6 AS rtt_ms, kind, direction
        FROM rtt_samples WHERE capture_id = ? AND flow_id = ?""",
                          [t0, capture_id, flow_id]).df()
    samples = decimate(samples[samples.t.between(lo, hi)].reset_index(drop=True), "rtt_ms",
                       lo, hi, by="kind")
    return alt.Chart(samples).mark_point().encode(
        x=alt.X("t:Q", title="time since the flow's first packet (s)"),
        y=alt.Y("rtt_ms:Q", title="RTT sample (ms)"),
        color="kind:N", shape="direction:N", tooltip=["t", "rtt_ms", "kind", "direction"],
    ).properties(width=900, height=320, title=f"RTT samples: {title}")


def build(con, kind, capture_id, flow_id, direction, t_from=None, t_to=None):
    """The chart KIND of one flow, over [t_from, t_to] s (None: the whole flow)."""
    if kind == "time-sequence":
        return time_sequence(con, capture_id, flow_id, direction, t_from, t_to)
    if kind == "inflight":
        return inflight(con, capture_id, flow_id, direction, t_from, t_to)
    if kind == "rtt":
        return rtt(con, capture_id, flow_id, None, t_from, t_to)
    raise TracekitError(f"unknown chart {kind!r}; known: {', '.join(KINDS)}")


def save(chart, stem, title=None):
    """Write STEM.html (self-contained: the Vega runtime inlined once, the spec
    as inert JSON, presentation/page.py) and STEM.png; return the two paths."""
    from .page import Page
    html, png = f"{stem}.html", f"{stem}.png"
    page = Page(title or f"tracekit plot: {stem.rsplit('/', 1)[-1]}")
    page.section(None).append(page.chart(chart, ""))
    with open(html, "w", encoding="utf-8") as f:
        f.write(page.render())
    chart.save(png, scale_factor=1.5)
    return html, png
