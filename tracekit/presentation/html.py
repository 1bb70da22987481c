"""`tracekit report`: one self-contained HTML page of a store, a run or an
experiment -- what was measured, the ablation table, where the time went per
arm and per request, the flows that matter, playback and serving -- with the
provenance of every figure (which capture, which log, vantage, the bound's
inputs and where each came from).

The page needs no network: Vega, Vega-Lite and Vega-Embed are inlined once
(vl-convert's bundle) and every chart is a Vega-Lite spec drawn as SVG. The
tables hold the numbers the CLI prints (the same SQL views), as text.
"""

import datetime
import html
import json

from ..core.errors import TracekitError
from ..core.version import __version__
from ..pipeline.runner import run_analysis


def _esc(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return html.escape(f"{v:g}")
    return html.escape(str(v))


def _table(columns, rows, cls="data", limit=None):
    shown = rows if limit is None else rows[:limit]
    head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_esc(v)}</td>" for v in r) + "</tr>" for r in shown)
    more = (f"<p class='note'>{len(rows) - len(shown):,} more rows: tracekit sql or the CLI "
            f"views show them all.</p>" if len(rows) > len(shown) else "")
    return f"<table class='{cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


class Page:
    def __init__(self, title):
        self.title = title
        self.sections = []  # (heading, html)
        self.charts = []  # (div id, spec)

    def section(self, heading, body):
        self.sections.append((heading, body))

    def chart(self, chart, caption):
        cid = f"chart{len(self.charts)}"
        self.charts.append((cid, chart.to_dict()))
        return (f"<figure><div id='{cid}' class='chart'></div>"
                f"<figcaption>{caption}</figcaption></figure>")

    def render(self):
        import vl_convert
        bundle = vl_convert.javascript_bundle()
        specs = json.dumps({cid: spec for cid, spec in self.charts})
        toc = "".join(f"<li><a href='#s{i}'>{html.escape(h)}</a></li>"
                      for i, (h, _) in enumerate(self.sections))
        body = "".join(f"<section id='s{i}'><h2>{html.escape(h)}</h2>{b}</section>"
                       for i, (h, b) in enumerate(self.sections))
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{html.escape(self.title)}</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
h1 {{ font-size: 1.6em; }} h2 {{ border-bottom: 1px solid #ddd; padding-bottom: .2em; }}
table.data {{ border-collapse: collapse; font: 12px/1.3 ui-monospace, monospace; margin: .5em 0; }}
table.data th, table.data td {{ border: 1px solid #ddd; padding: 2px 6px; text-align: right;
                               vertical-align: top; }}
td:last-child {{ text-align: left; }}
table.data th {{ background: #f4f4f4; }}
figure {{ margin: 1em 0; }} figcaption, .note {{ color: #555; font-size: 12px; }}
</style></head><body>
<h1>{html.escape(self.title)}</h1>
<p class="note">tracekit {__version__}, {stamp}. Every number below is in the store; the
captions say where each came from.</p>
<ol>{toc}</ol>
{body}
<pre id="errors" hidden></pre>
<script>
// every error the page meets is written into #errors (a test reads it back)
const errors = document.getElementById("errors");
function note(text) {{ errors.hidden = false; errors.textContent += text + "\n"; }}
window.addEventListener("error", e => note("error: " + e.message));
const consoleError = console.error;
console.error = (...args) => {{ note("console.error: " + args.join(" ")); consoleError(...args); }};
</script>
<script>{bundle}</script>
<script>
const specs = {specs};
for (const [id, spec] of Object.entries(specs)) {{
  vegaEmbed("#" + id, spec, {{renderer: "svg", actions: false}})
    .then(() => document.getElementById(id).setAttribute("data-rendered", "yes"))
    .catch(err => console.error("chart " + id + ": " + err));
}}
</script>
</body></html>
"""


def _measured(con, page, where_run):
    cols, rows = _query(con, """
        SELECT capture_id AS capture, file_name, format, packets,
               round((last_ts_ns - first_ts_ns) / 1e9, 3) AS seconds,
               read_stop, array_to_string(list_transform(map_entries(labels),
                                                         lambda e: e.key || '=' || e.value), ' ') AS labels
        FROM captures c
        WHERE $run IS NULL OR labels['run'] = $run OR labels['experiment'] = $run
        ORDER BY capture_id""", run=where_run)
    logs_cols, logs = _query(con, """
        SELECT log_id AS log, file_name, format, events, malformed, clock_source,
               array_to_string(list_transform(map_entries(labels),
                                              lambda e: e.key || '=' || e.value), ' ') AS labels
        FROM event_logs
        WHERE $run IS NULL OR labels['run'] = $run OR labels['experiment'] = $run
        ORDER BY log_id""", run=where_run)
    if not rows and not logs:
        raise TracekitError("nothing in the store matches (see tracekit captures and runs)")
    page.section("What was measured",
                 "<h3>Captures</h3>" + _table(cols, rows, limit=40)
                 + "<h3>Event logs</h3>" + (_table(logs_cols, logs, limit=40) if logs else
                                             "<p class='note'>none</p>"))
    return [r[0] for r in rows]


def _query(con, sql, **params):
    cur = con.execute(sql, params)
    return [d[0] for d in cur.description], cur.fetchall()


def _ablation(con, page, compare, by, levels, where):
    from .ablation import ablation
    from .ablation_charts import ablation_bars, attribution_stacked
    from .table import ablation_rows
    results = ablation(con, compare, by=by, levels=levels, where=where)
    cols, rows = ablation_rows(results, by)
    text = _table(cols, rows)
    text += page.chart(ablation_bars(results, by),
                       f"Median request time per arm of <code>{_esc(compare)}</code> with its "
                       f"bootstrap 95 % interval (2,000 resamples, seed 1); requests of "
                       f"{_esc(where or 'the whole store')}.")
    text += page.chart(attribution_stacked(results, by),
                       "The median of each span per arm (tracekit attribution): each span is "
                       "backed by evidence; what nothing explains is <code>unexplained</code>.")
    page.section(f"Ablation: {compare}" + (f" by {', '.join(by)}" if by else ""), text)


def _attribution(con, page, run):
    from .ablation_charts import waterfall
    cols, rows = run_analysis(con, "views/attribute", run=run)
    if not rows:
        return
    text = _table(cols, rows, limit=300)
    col = {c: i for i, c in enumerate(cols)}
    gaps = sorted((r for r in rows if r[col["gap_ms"]] is not None), key=lambda r: r[col["gap_ms"]])
    picks = []
    if gaps:
        picks = [gaps[len(gaps) // 2], gaps[-1]]
    bound_cols, bound_rows = _query(con, """
        SELECT request_key, round(rtt_ns / 1e6, 3) AS rtt_ms, rtt_source,
               round(rate_bps / 1e6, 3) AS rate_mbps, rate_source,
               round(processing_ns / 1e6, 3) AS processing_ms, processing_source, vantage, partial
        FROM bounds WHERE request_key IN (SELECT unnest($keys::VARCHAR[]))""",
        keys=[p[0] for p in picks]) if picks else ([], [])
    for label, r in zip(("the median gap", "the largest gap"), picks):
        key = r[0]
        text += page.chart(waterfall(con, key),
                           f"Request <code>{_esc(key)}</code> ({label}): {_esc(r[col['measured_ms']])} "
                           f"ms measured, bound {_esc(r[col['bound_ms']])} ms, seen at the "
                           f"{_esc(r[col['vantage']])}; T_c from {_esc(r[col['processing_source']])}.")
    if bound_rows:
        text += "<h3>The bound's inputs for these requests, and their sources</h3>"
        text += _table(bound_cols, bound_rows)
    page.section("Where the time went, per request", text)


def _flows(con, page, captures, limit=3):
    from .charts import time_sequence
    if not captures:
        return
    cols, rows = _query(con, """
        SELECT f.capture_id, f.flow_id, f.client_addr || ':' || f.client_port AS client,
               f.server_addr || ':' || f.server_port AS server, f.payload_bytes_s2c AS bytes_s2c,
               coalesce(r.retransmissions, 0) AS retransmissions
        FROM flows f LEFT JOIN (SELECT capture_id, flow_id, count(*) AS retransmissions
                                FROM retransmissions GROUP BY ALL) r USING (capture_id, flow_id)
        WHERE f.protocol = 'tcp' AND f.capture_id IN (SELECT unnest($ids::INTEGER[]))
          AND f.packets_s2c > 2
        ORDER BY retransmissions DESC, f.payload_bytes_s2c DESC, f.capture_id, f.flow_id
        LIMIT $limit""", ids=captures, limit=limit)
    if not rows:
        return
    text = _table(cols, rows)
    for capture_id, flow_id, client, server, _, retrans in rows:
        (fname, vantage), = con.execute(
            "SELECT c.file_name, coalesce(s.vantage, 'unknown') FROM captures c LEFT JOIN "
            "(SELECT capture_id, any_value(vantage) AS vantage FROM rtt_summary GROUP BY ALL) s "
            "USING (capture_id) WHERE capture_id = ?", [capture_id]).fetchall()
        text += page.chart(time_sequence(con, capture_id, flow_id),
                           f"Capture {capture_id} ({_esc(fname)}, seen at the {_esc(vantage)}), "
                           f"flow {flow_id}: {_esc(server)} to {_esc(client)}; {retrans} "
                           f"retransmissions. Segments by class, the ACK and receive-window "
                           f"lines, SACK blocks; the ribbon below is the sender's limitation "
                           f"state.")
    page.section("The flows that matter", text)


def _playback(con, page, run):
    from .app_charts import playback_buffer
    cols, rows = run_analysis(con, "views/playback", run=run)
    if not rows:
        return
    text = _table(cols, rows)
    ucols, urows = run_analysis(con, "views/underruns", run=run)
    if urows:
        text += "<h3>Underruns</h3>" + _table(ucols, urows)
    streams = [r[cols.index("stream")] for r in rows if not str(r[cols.index("stream")]).startswith("(")]
    for stream in streams[:4]:
        text += page.chart(playback_buffer(con, stream),
                           f"Playback buffer of stream <code>{_esc(stream)}</code> (audio received "
                           f"and not yet played), underruns shaded by the stage charged: the "
                           f"model, the transport or the client, from the client's and the "
                           f"server's events and the capture.")
    page.section("Playback", text)


def _serving(con, page, run):
    cols, rows = run_analysis(con, "views/serving", run=run)
    if rows:
        page.section("Model serving", _table(cols, rows))


def build(con, run=None, compare=None, by=(), levels=None, where=None):
    """The report as one HTML string. `run`: a run or an experiment label (None:
    the whole store); `compare`/`by`/`levels`/`where`: the ablation to show."""
    n = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'attribution'"
                    ).fetchall()[0][0]
    if not n:
        raise TracekitError("the store has not been analysed yet; run tracekit analyze")
    title = f"tracekit report: {run}" if run else "tracekit report"
    page = Page(title)
    captures = _measured(con, page, run)
    runs = [r[0] for r in con.execute(
        "SELECT DISTINCT run FROM runs WHERE $run IS NULL OR run = $run OR experiment = $run",
        {"run": run}).fetchall()] if run else [None]
    if compare:
        if run and not where:  # the ablation of this experiment (or run) only
            (is_experiment,), = con.execute("SELECT count(*) > 0 FROM runs WHERE experiment = ?",
                                            [run]).fetchall()
            where = {"experiment" if is_experiment else "run": run}
        _ablation(con, page, compare, tuple(by), levels, where)
    _attribution(con, page, runs[0] if len(runs) == 1 else None)
    _flows(con, page, captures)
    _playback(con, page, run)  # (an experiment's name matches no stream's run: none shown)
    _serving(con, page, run)
    return page.render()
