"""Charts of one flow (Altair): time-sequence graph with its limitation ribbon,
bytes in flight with the flight ceilings, RTT samples.

Each function returns an Altair chart built from the derived tables; `save`
writes it as a self-contained HTML file (the Vega libraries inlined: it works
offline) and as PNG. Time is in seconds from the flow's first packet, sequence
numbers are relative to the sender's ISN, as in Wireshark's Stevens graph.
"""

from ..core.errors import TracekitError

KINDS = ("time-sequence", "inflight", "rtt")
SEGMENT_COLORS = {"new": "#4c78a8", "repeat": "#e45756", "hole_fill": "#f58518",
                  "reordered": "#72b7b2", "duplicate": "#b279a2"}


def _alt():
    try:
        import altair as alt
    except ImportError:
        raise TracekitError("charts need Altair: pip install 'tracekit[charts]'") from None
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


def time_sequence(con, capture_id, flow_id, direction="s2c"):
    """Segments as bars from seq to end, ACK and receive-window lines, SACK blocks,
    and under it a ribbon of the limitation states."""
    alt = _alt()
    import pandas as pd
    t0, ends = _flow(con, capture_id, flow_id)
    title = _data_title(ends, direction)
    data_from_client = direction == "c2s"
    segs = con.execute("""
        SELECT (ts_ns - ?) / 1e9 AS t, rel_seq AS seq, rel_end AS seq_end, segment
        FROM tcp_analysis WHERE capture_id = ? AND flow_id = ? AND from_client = ?
          AND segment IS NOT NULL""", [t0, capture_id, flow_id, data_from_client]).df()
    acks = con.execute("""
        SELECT (t.ts_ns - ?) / 1e9 AS t, t.rel_ack AS ack,
               t.rel_ack + p.tcp_window_bytes AS window_edge
        FROM tcp_analysis t JOIN packets p USING (capture_id, frame)
        WHERE t.capture_id = ? AND t.flow_id = ? AND t.from_client <> ? AND t.rel_ack IS NOT NULL
        ORDER BY t.frame""", [t0, capture_id, flow_id, data_from_client]).df()
    sacks = con.execute("""
        SELECT (t.ts_ns - ?) / 1e9 AS t,
               -- each edge: the relative number nearest the ACK's (RFC 1982)
               t.rel_ack + (unnest(p.tcp_sack_left)::BIGINT - p.tcp_ack::BIGINT
                            + 6442450944) % 4294967296 - 2147483648 AS lo,
               t.rel_ack + (unnest(p.tcp_sack_right)::BIGINT - p.tcp_ack::BIGINT
                            + 6442450944) % 4294967296 - 2147483648 AS hi
        FROM tcp_analysis t JOIN packets p USING (capture_id, frame)
        WHERE t.capture_id = ? AND t.flow_id = ? AND t.from_client <> ?
          AND p.tcp_sack_left IS NOT NULL""", [t0, capture_id, flow_id, data_from_client]).df()
    states = con.execute("""
        SELECT (start_ns - ?) / 1e9 AS t, (end_ns - ?) / 1e9 AS t_end, state
        FROM stalls WHERE capture_id = ? AND flow_id = ? AND direction = ?""",
                         [t0, t0, capture_id, flow_id, direction]).df()
    x = alt.X("t:Q", title="time since the flow's first packet (s)")
    colors = alt.Scale(domain=list(SEGMENT_COLORS), range=list(SEGMENT_COLORS.values()))
    bars = alt.Chart(segs).mark_rule(strokeWidth=2).encode(
        x=x, y=alt.Y("seq:Q", title=f"relative sequence number ({direction})"), y2="seq_end:Q",
        color=alt.Color("segment:N", scale=colors, title="segment"),
        tooltip=["t", "seq", "seq_end", "segment"])
    # the receiver's lines, named in their own legend
    ack_name, window_name, sack_name = ("ACK (cumulative, from the receiver)",
                                        "receive window edge (ACK + window)",
                                        "SACK block (received above a hole)")
    lines = pd.concat([acks.assign(y=acks["ack"], line=ack_name)[["t", "y", "line"]],
                       acks.assign(y=acks["window_edge"], line=window_name)[["t", "y", "line"]]])
    line_scale = alt.Scale(domain=[ack_name, window_name, sack_name],
                           range=["#54a24b", "#bab0ac", "#9d755d"])
    line_color = alt.Color("line:N", scale=line_scale, title="receiver")
    receiver = alt.Chart(lines).mark_line(interpolate="step-after").encode(
        x="t:Q", y="y:Q", color=line_color,
        strokeDash=alt.condition(f"datum.line == '{window_name}'", alt.value([4, 2]),
                                 alt.value([1, 0])),
        detail="line:N")
    resent = alt.Chart(segs[segs.segment != "new"]).mark_point(size=60, filled=True).encode(
        x="t:Q", y="seq:Q", color=alt.Color("segment:N", scale=colors),
        tooltip=["t", "seq", "seq_end", "segment"])
    layers = [receiver, bars, resent]
    if len(sacks):
        layers.append(alt.Chart(sacks.assign(line=sack_name)).mark_rule(strokeWidth=4, opacity=0.6)
                      .encode(x="t:Q", y="lo:Q", y2="hi:Q", color=line_color))
    top = alt.layer(*layers).resolve_scale(color="independent").properties(
        width=900, height=420, title=f"Time-sequence graph: data {title}")
    ribbon = alt.Chart(states).mark_rect().encode(
        x=alt.X("t:Q", title=None), x2="t_end:Q",
        color=alt.Color("state:N", title="limitation state"),
        tooltip=["state", "t", "t_end"]).properties(width=900, height=36)
    return alt.vconcat(top, ribbon).resolve_scale(color="independent")


def inflight(con, capture_id, flow_id, direction="s2c"):
    """Bytes in flight (tracekit's SACK-aware and Wireshark's) with each flight's ceiling."""
    alt = _alt()
    t0, ends = _flow(con, capture_id, flow_id)
    title = _data_title(ends, direction)
    series = con.execute("""
        SELECT (ts_ns - ?) / 1e9 AS t, inflight_bytes, wireshark_bytes
        FROM inflight WHERE capture_id = ? AND flow_id = ? AND direction = ?
        ORDER BY frame""", [t0, capture_id, flow_id, direction]).df()
    flights = con.execute("""
        SELECT (start_ns - ?) / 1e9 AS t, (coalesce(start_ns + duration_ns, end_ns) - ?) / 1e9
               AS t_end, peak_inflight_bytes, flight
        FROM flights WHERE capture_id = ? AND flow_id = ? AND direction = ?""",
                          [t0, t0, capture_id, flow_id, direction]).df()
    x = alt.X("t:Q", title="time since the flow's first packet (s)")
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


def rtt(con, capture_id, flow_id, direction=None):
    """RTT samples over time, by kind."""
    alt = _alt()
    t0, ends = _flow(con, capture_id, flow_id)
    title = f"{ends[0]} <-> {ends[1]}"
    samples = con.execute("""
        SELECT (ts_ns - ?) / 1e9 AS t, rtt_ns / 1e6 AS rtt_ms, kind, direction
        FROM rtt_samples WHERE capture_id = ? AND flow_id = ?""",
                          [t0, capture_id, flow_id]).df()
    return alt.Chart(samples).mark_point().encode(
        x=alt.X("t:Q", title="time since the flow's first packet (s)"),
        y=alt.Y("rtt_ms:Q", title="RTT sample (ms)"),
        color="kind:N", shape="direction:N", tooltip=["t", "rtt_ms", "kind", "direction"],
    ).properties(width=900, height=320, title=f"RTT samples: {title}")


def build(con, kind, capture_id, flow_id, direction):
    if kind == "time-sequence":
        return time_sequence(con, capture_id, flow_id, direction)
    if kind == "inflight":
        return inflight(con, capture_id, flow_id, direction)
    if kind == "rtt":
        return rtt(con, capture_id, flow_id)
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
