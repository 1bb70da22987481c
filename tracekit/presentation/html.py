"""`tracekit report`: one self-contained HTML page that leads with the answer.

First "The answer": for each experiment (or run) in scope, the ablation's
verdict for each factor of its design (or the `--compare` asked for), hedged
as `tracekit ablation` hedges it; where the time went (each span's share of
the scope's requests' time); the flagged requests. Then the drill-down: the
ablation tables and charts, the requests with their bound and gap, the
waterfalls of the median and the largest gap, the flows with the most
retransmissions, playback and serving, and what was measured (captures and
logs). Every section holds only what `--run`, `--experiment` and `--where`
select (presentation/scope.py), the same requests the views show.

The page is a Jinja2 template with autoescaping and the charts' specs are
inert JSON (presentation/page.py): a value in the store is always text.
"""

from ..core.errors import TracekitError
from ..pipeline.runner import run_analysis
from .page import Page
from .scope import resolve

REQUEST_ROWS = 200
# The what-if replay beside each verdict uses `tracekit ablation --predict`'s
# draws (whatif.engine.DRAWS, 400), so the figures are the CLI's; at most this
# many replays per page keep a large store's report fast (about 1 s each).
REPLAYS = 8


def _predicted(c):
    """The what-if line of a verdict, in the numbers `ablation --predict` prints."""
    p = c.prediction
    if p is None:
        return ""
    def ms(ns):  # ablation_rows' rounding
        return round(ns / 1e6, 1)
    a, b = c.arms[0].level, c.arms[1].level
    return (f"; the what-if replay predicts {a} - {b} = {ms(p.predicted_ns):+} ms, measured "
            f"{ms(p.measured_ns):+} ms (95 % interval {ms(p.ci_low_ns)} to {ms(p.ci_high_ns)}): "
            f"{'holds' if p.holds else 'misses'}")


def _query(con, sql, **params):
    cur = con.execute(sql, params)
    return [d[0] for d in cur.description], cur.fetchall()


def _designs(con, scope, compare, by, levels):
    """[(experiment or None, compare, by, levels, where)] of the ablations to show."""
    experiments = sorted({r[2] for r in scope.requests if r[2] is not None})
    out = []
    for e in experiments:
        where = {**scope.labels(), "experiment": e}
        if compare:
            out.append((e, compare, tuple(by), levels, where))
            continue
        design = con.execute("SELECT any_value(design) FROM runs WHERE experiment = ?",
                             [e]).fetchall()[0][0] or []
        for factor in (f for f in design if f not in where):  # (a factor --where fixes: none)
            out.append((e, factor, tuple(f for f in design if f != factor), None, where))
    if compare and not experiments:
        out.append((None, compare, tuple(by), levels, scope.labels()))
    return out


def _ablations(con, page, scope, compare, by, levels):
    """The verdict lines of the answer; the tables and charts in their section."""
    from .ablation import ablation, replayed, verdict
    from .ablation_charts import ablation_bars, attribution_stacked
    from .table import ablation_rows
    lines, blocks, charted, empty = [], [], set(), {}
    for experiment, factor, by_, levels_, where in _designs(con, scope, compare, by, levels):
        try:
            results = ablation(con, factor, by=by_, levels=levels_, where=where)
        except TracekitError as e:
            lines.append(f"{experiment or scope.describe()}: {factor}: {e}")
            continue
        name = f"{factor}" + (f" by {', '.join(by_)}" if by_ else "")
        for c in results:
            if len(c.arms) < 2 or not all(a.n for a in c.arms[:2]):
                continue  # (an arm has no requests: said once below, shown in the table)
            if page.replays < REPLAYS:  # (a factor the engine does not know: None, at once)
                c.prediction = replayed(con, c, factor, by_, where)
                page.replays += c.prediction is not None
            cell = c.label(by_)
            lines.append(f"{experiment or 'requests'}: {factor}"
                         + (f" ({cell})" if cell else "") + f": {verdict(c)[1]}" + _predicted(c))
        if all(len(c.arms) < 2 or not all(a.n for a in c.arms[:2]) for c in results):
            empty.setdefault(experiment or "requests", []).append(factor)
        predicted = any(c.prediction for c in results)
        cols, rows = ablation_rows(results, by_, predictions=predicted)
        blocks.append(Page.text(
            (f"Requests with {', '.join(f'{k}={v}' for k, v in where.items())}; " if where
             else "Every request that carries the attribute; ") + "ratio = first "
            f"arm / second; spans_moved: the median paired change of each span, signed, in ms."
            + (" predicted_ms: the what-if replay's saving (tracekit ablation --predict, "
               f"400 draws; at most {REPLAYS} replays per report)." if predicted else ""),
            heading=f"{experiment or scope.describe()}: {name}"))
        blocks.append(Page.table(cols, rows))
        if experiment not in charted:
            charted.add(experiment)
            blocks.append(page.chart(ablation_bars(results, by_),
                                     f"Median request time per arm of {factor} with its bootstrap "
                                     f"95 % interval (2,000 resamples, seed 1)."))
            blocks.append(page.chart(attribution_stacked(results, by_),
                                     "The median of each span per arm (tracekit attribution): "
                                     "each span is backed by evidence; what nothing explains "
                                     "is unexplained."))
    lines += [f"{e}: no two arms to compare for {', '.join(factors)} (in each cell an arm has "
              f"no requests; the ablation tables)" for e, factors in empty.items()]
    return lines, blocks


def _groups(con, scope, attribute):
    """(columns, rows): per experiment (else run) in scope, its requests, their
    median time, the spans that took most of it and the flagged requests."""
    cols, rows = attribute
    col = {c: i for i, c in enumerate(cols)}
    group = {r[0]: r[2] or (f"run {r[1]}" if r[1] else "requests of no run") for r in scope.requests}
    spans = con.execute("""
        SELECT request_key, span, sum(ns)::DOUBLE FROM attribution
        WHERE list_contains($keys, request_key) GROUP BY ALL HAVING sum(ns) > 0""",
                        {"keys": scope.keys}).fetchall()
    totals = {}
    for key, span, ns in spans:
        by_span = totals.setdefault(group[key], {})
        by_span[span] = by_span.get(span, 0) + ns
    out = []
    for name in sorted({group[r[0]] for r in rows}):
        mine = [r for r in rows if group[r[0]] == name]
        measured = sorted(r[col["measured_ms"]] for r in mine if r[col["measured_ms"]] is not None)
        by_span = totals.get(name, {})
        whole = sum(by_span.values()) or 1
        top = sorted(by_span.items(), key=lambda kv: -kv[1])[:4]
        out.append([name, len(mine), measured[len(measured) // 2] if measured else None,
                    ", ".join(f"{span} {ns / whole:.0%}" for span, ns in top),
                    sum(1 for r in mine if r[col["flag"]])])
    return ["requests of", "requests", "median_ms", "most of their time", "flagged"], out


def _answer(con, page, scope, attribute, ablation_lines):
    cols, rows = attribute
    col = {c: i for i, c in enumerate(cols)}
    lines = list(ablation_lines) or ["no ablation: no experiment in scope and no --compare"]
    page.summary.append(Page.text(lines, heading="Verdicts of the ablations", cls="answer"))
    if rows:
        page.summary.append(Page.text("Each span's share of the requests' summed time "
                                      "(tracekit attribution).", heading="Where the time went"))
        page.summary.append(Page.table(*_groups(con, scope, attribute)))
    flagged = [r for r in rows if r[col["flag"]]]
    text = ([f"{r[col['request']]}: {r[col['flag']]} ({r[col['measured_ms']]} ms measured)"
             for r in flagged[:5]] + ([f"and {len(flagged) - 5} more (the requests table)"]
                                      if len(flagged) > 5 else [])) or ["none"]
    page.summary.append(Page.text(text, heading=f"Flagged requests: {len(flagged)}", cls="answer"))


def _requests(con, page, scope, attribute):
    from .ablation_charts import waterfall
    from .explorer import request_explorer
    cols, rows = attribute
    if not rows:
        return
    col = {c: i for i, c in enumerate(cols)}
    blocks = page.section("Requests: measured, bound and gap", "requests")
    keys = [r[0] for r in rows]
    gaps = sorted((r for r in rows if r[col["gap_ms"]] is not None), key=lambda r: r[col["gap_ms"]])
    shown = [r for r in rows[:REQUEST_ROWS] if r[col["gap_ms"]] is not None] or rows[:1]
    first = max(shown, key=lambda r: r[col["gap_ms"]] or 0)[0]  # (one the table shows)
    blocks.append(page.chart(request_explorer(con, keys[:REQUEST_ROWS], first), (
        "Click a request (a bar, or its row in the table below): its spans and its packets "
        "follow; at first the request with the largest gap of those in the table. Hover a "
        "mark for its values; a packet's frame number is Wireshark's frame.number in that "
        "capture.")))
    blocks.append(Page.table(cols, rows, limit=REQUEST_ROWS, keys=keys,
                             note="In start order; times in ms (the view tracekit attribute). "
                                  "Click a row to explore it in the chart above."))
    picks = {}
    for label, r in (("the median gap", gaps[len(gaps) // 2] if gaps else None),
                     ("the largest gap", gaps[-1] if gaps else None)):
        if r is not None and r[0] not in picks:
            picks[r[0]] = (label, r)
    for key, (label, r) in picks.items():
        blocks.append(page.chart(waterfall(con, key), (
            f"Request {key} ({label}): {r[col['measured_ms']]} ms measured, bound "
            f"{r[col['bound_ms']]} ms, seen at the {r[col['vantage']] or 'unknown vantage'} "
            f"point; T_c from {r[col['processing_source']] or 'no source'}.")))
    bcols, brows = _query(con, """
        SELECT request_key, round(rtt_ns / 1e6, 3) AS rtt_ms, rtt_source,
               round(rate_bps / 1e6, 3) AS rate_mbps, rate_source,
               round(processing_ns / 1e6, 3) AS processing_ms, processing_source, vantage, partial
        FROM bounds WHERE list_contains($keys, request_key) ORDER BY request_key""",
                          keys=list(picks))
    if brows:
        blocks.append(Page.text("Each input of the bound of these requests, and its source.",
                                heading="The bound's inputs"))
        blocks.append(Page.table(bcols, brows))


def _flows(con, page, scope, limit=3):
    from .charts import time_sequence
    if not scope.captures:
        return
    cols, rows = _query(con, """
        SELECT f.capture_id, f.flow_id, f.client_addr || ':' || f.client_port AS client,
               f.server_addr || ':' || f.server_port AS server, f.packets_c2s + f.packets_s2c
               AS packets, f.payload_bytes_s2c AS bytes_s2c,
               coalesce(r.retransmissions, 0) AS retransmissions
        FROM flows f LEFT JOIN (SELECT capture_id, flow_id, count(*) AS retransmissions
                                FROM retransmissions GROUP BY ALL) r USING (capture_id, flow_id)
        WHERE f.protocol = 'tcp' AND list_contains($ids, f.capture_id) AND f.packets_s2c > 2
        ORDER BY retransmissions DESC, f.payload_bytes_s2c DESC, f.capture_id, f.flow_id
        LIMIT $limit""", ids=scope.captures, limit=limit)
    if not rows:
        return
    blocks = page.section("The flows with the most retransmissions", "flows")
    blocks.append(Page.table(cols, rows))
    for capture_id, flow_id, client, server, _, _, retrans in rows:
        (fname,), = con.execute("SELECT file_name FROM captures WHERE capture_id = ?",
                                [capture_id]).fetchall()
        blocks.append(page.chart(time_sequence(con, capture_id, flow_id), (
            f"Capture {capture_id} ({fname}), flow {flow_id}: data {server} to {client}, "
            f"{retrans} retransmissions. Segments by class, the ACK and receive-window lines, "
            f"SACK blocks; the ribbon below, on the same time axis, is the sender's limitation "
            f"state. tracekit plot time-sequence --capture {capture_id} --flow {flow_id} "
            f"--from S --to S draws a stretch in full detail.")))


def _application(con, page, scope):
    from .app_charts import playback_buffer
    runs = None if scope.everything else set(scope.runs)
    cols, rows = run_analysis(con, "views/playback", run=None)
    rows = [r for r in rows if runs is None or r[cols.index("run")] in runs]
    if rows:
        blocks = page.section("Playback", "playback")
        blocks.append(Page.table(cols, rows))
        ucols, urows = run_analysis(con, "views/underruns", run=None)
        urows = [r for r in urows if runs is None or r[ucols.index("run")] in runs]
        if urows:
            blocks += [Page.text("Each underrun, charged to a stage.", heading="Underruns"),
                       Page.table(ucols, urows)]
        streams = [r[cols.index("stream")] for r in rows
                   if not str(r[cols.index("stream")]).startswith("(")]
        for stream in streams[:4]:
            blocks.append(page.chart(playback_buffer(con, stream), (
                f"Playback buffer of stream {stream} (audio received and not yet played), "
                f"underruns shaded by the stage charged: the model, the transport or the client.")))
    cols, rows = run_analysis(con, "views/serving", run=scope.run) \
        if scope.everything or (scope.run and not scope.experiment and not scope.where) \
        else ([], [])  # (serving batches carry a run, no labels)
    if rows:
        page.section("Model serving", "serving").append(Page.table(cols, rows))


def _measured(con, page, scope):
    blocks = page.section("What was measured", "measured")
    cols, rows = _query(con, """
        SELECT capture_id AS capture, file_name, format, packets,
               round((last_ts_ns - first_ts_ns) / 1e9, 3) AS seconds, read_stop,
               array_to_string(list_transform(map_entries(labels),
                                              lambda e: e.key || '=' || e.value), ' ') AS labels
        FROM captures WHERE list_contains($ids, capture_id) ORDER BY capture_id""",
                        ids=scope.captures)
    blocks += [Page.text(f"{len(rows)} captures.", heading="Captures"), Page.table(cols, rows)]
    cols, rows = _query(con, """
        SELECT log_id AS log, file_name, format, events, malformed, clock_source,
               array_to_string(list_transform(map_entries(labels),
                                              lambda e: e.key || '=' || e.value), ' ') AS labels
        FROM event_logs WHERE list_contains($ids, log_id) ORDER BY log_id""", ids=scope.logs)
    blocks += [Page.text(f"{len(rows)} event logs.", heading="Event logs"), Page.table(cols, rows)]


def build(con, run=None, experiment=None, compare=None, by=(), levels=None, where=None):
    """The report as one HTML string: `run`, `experiment`, `where` ({label:
    value}) choose the requests as the views do (None: the whole store);
    `compare`/`by`/`levels` the ablation (else each factor of each
    experiment's design)."""
    if not con.execute("SELECT count(*) FROM information_schema.tables "
                       "WHERE table_name = 'attribution'").fetchall()[0][0]:
        raise TracekitError("the store has not been analysed yet; run tracekit analyze")
    scope = resolve(con, run, experiment, where)
    page = Page("tracekit report: " + scope.describe())
    cols, rows = run_analysis(con, "views/attribute", run=None)
    keys = set(scope.keys)
    attribute = (cols, [r for r in rows if r[0] in keys])
    lines, blocks = _ablations(con, page, scope, compare, tuple(by), levels)
    _answer(con, page, scope, attribute, lines)
    if blocks:
        page.section("Ablations", "ablations").extend(blocks)
    _requests(con, page, scope, attribute)
    _flows(con, page, scope)
    _application(con, page, scope)
    _measured(con, page, scope)
    return page.render()
