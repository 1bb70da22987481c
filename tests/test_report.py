"""tracekit report: the answer first, every section scoped, the page safe.

Opened in Debian's headless chromium with the network cut off (tests/browser.py):
no error, every chart drawn as SVG; the tables hold the CLI's numbers; a
request id that is markup stays text in the report and in `plot waterfall`."""

import csv
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser import check_drawn, dump, needs_chromium, screenshot

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ("</script><script>document.body.setAttribute('data-pwned','1')</script>"
           "<img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">\u2028&amp;")


def _tracekit(*args, cwd=None):
    r = subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True,
                       text=True, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _report(store, out, *args):
    said = _tracekit("report", "--db", str(store), "--out", str(out), *args)
    assert said.startswith(f"wrote {out}")
    return out.read_text()


@pytest.fixture(scope="module")
def report(demo_store, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    _report(demo_store, out, "--experiment", "cross-region", "--compare", "path", "--by",
            "connection", "--levels", "direct,tunnel")
    return out


def test_the_page_is_self_contained_and_leads_with_the_answer(report):
    text = report.read_text()
    assert not re.search(r"""(src|href)=["']https?://""", text)  # nothing fetched
    assert text.count("vegaEmbed(") == 1 and text.count('id="specs"') == 1  # runtime once
    answer = text.index("The answer")
    assert answer < text.index(">Ablations<") < text.index(">What was measured<")
    # the hedged verdicts: persistent's interval (0.95-1.68) includes 1, fresh's does not
    assert ("cross-region: path (connection=persistent): no difference shown: direct/tunnel = "
            "1.28, but the 95 % interval 0.95-1.68 includes 1") in text
    assert ("cross-region: path (connection=fresh): tunnel faster than direct: direct/tunnel "
            "= 2.88") in text
    assert "{" not in re.sub(r"<script.*?</script>|<style.*?</style>", "", text, flags=re.S)


def test_every_section_holds_only_the_scope(report, demo_store):
    import duckdb
    con = duckdb.connect(str(demo_store), read_only=True)
    inside = {r[0] for r in con.execute("SELECT request_key FROM requests "
                                        "WHERE labels['experiment'] = 'cross-region'").fetchall()}
    outside = {r[0] for r in con.execute("SELECT request_key FROM requests WHERE "
                                         "labels['experiment'] IS DISTINCT FROM 'cross-region'").fetchall()}
    text = report.read_text()
    cells = set(re.findall(r"<td>([^<]*)</td>", text))
    assert inside <= cells and not outside & cells
    waterfalls = re.findall(r"<figcaption>Request (\S+) \(", text)
    assert len(waterfalls) == len(set(waterfalls)) >= 1  # no request drawn twice


def test_run_scopes_as_the_views_do(demo_store):
    """In one process (the library's Store.report, what the command calls)."""
    import tracekit
    from tracekit.core.errors import TracekitError
    with tracekit.open(demo_store, read_only=True) as store:
        text = store.report(run="stalls")
        assert {"log1:transport", "log1:model", "log1:local"} <= set(
            re.findall(r"<td>([^<]*)</td>", text))
        assert "log20:r0" not in text and ">Playback<" in text
        text = store.report(experiment="cross-region", where={"connection": "fresh"})
        assert re.findall(r"<li>(cross-region: [^<]*?):", text) == [
            "cross-region: path (connection=fresh)"]  # the factor --where fixes is not compared
        rows = re.findall(r"<tr[^>]*><td>(log\d+:r\d+)</td><td>[^<]*</td><td>([^<]*)</td>", text)
        assert rows and {c for _, c in rows} == {"fresh"}
        with pytest.raises(TracekitError, match="it is an experiment: --experiment cross-region"):
            store.report(run="cross-region")


def test_the_tables_hold_the_clis_numbers(report, demo_store):
    text = report.read_text()
    rows = list(csv.DictReader(io.StringIO(_tracekit(
        "attribute", "--db", str(demo_store), "--run", "cross-region-001", "--format", "csv"))))
    assert rows
    for row in rows:
        assert f"<td>{row['request']}</td>" in text
        assert f'<td class="num">{row["measured_ms"]}</td>' in text
    ablation = _tracekit("ablation", "--db", str(demo_store), "--compare", "path", "--by",
                         "connection", "--levels", "direct,tunnel", "--where",
                         "experiment=cross-region", "--format", "csv")
    for row in csv.DictReader(io.StringIO(ablation)):
        for column in ("ratio", "ci_low", "ci_high", "won"):
            assert f'<td class="num">{row[column]}</td>' in text, column


@needs_chromium
def test_every_chart_renders_offline_without_errors(report, tmp_path):
    dom = dump(report)
    assert len(check_drawn(dom)) >= 5
    top, bottom = map(int, re.search(r'<body data-answer="(\d+)-(\d+)"', dom).groups())
    assert top < 150 and bottom < 900  # the answer, whole, in the first screen
    shot = screenshot(report, tmp_path / "report.png")
    assert shot.stat().st_size > 20_000


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory):
    """The stalls sample with every request id, stream and run replaced by markup."""
    import json
    d = tmp_path_factory.mktemp("hostile")
    shutil.copy(ROOT / "captures/streaming-stalls-client.pcap", d / "client.pcap")
    with open(ROOT / "captures/streaming-stalls-client-events.jsonl") as f, \
            open(d / "client-events.jsonl", "w") as out:
        for line in f:
            e = json.loads(line)
            for k in ("request", "stream", "run"):
                if k in e:
                    e[k] = HOSTILE + e[k]
            out.write(json.dumps(e) + "\n")
    db = d / "hostile.duckdb"
    _tracekit("ingest", str(d / "client.pcap"), str(d / "client-events.jsonl"), "--db", str(db),
              "--label", f"source={HOSTILE}")
    _tracekit("analyze", "--db", str(db))
    return db


@needs_chromium
def test_markup_in_the_store_stays_text(hostile_store, tmp_path):
    page = tmp_path / "hostile.html"
    text = _report(hostile_store, page)
    assert "</script><script>document" not in text and "<img src=x" not in text
    key = f"log1:{HOSTILE}transport"
    _tracekit("plot", "waterfall", "--db", str(hostile_store), "--request", key, "--out",
              str(tmp_path / "waterfall"))
    for path in (page, tmp_path / "waterfall.html"):
        dom = dump(path)
        assert check_drawn(dom)
        markup = re.sub(r"<script[^>]*>.*?</script>", "", dom, flags=re.S)  # (Vega's own code)
        assert not re.search(r"<body[^>]*data-pwned", dom) and "<img" not in markup
        # the id arrives intact, as text (escaped once in the DOM's serialisation)
        assert "&lt;/script&gt;&lt;script&gt;document.body.setAttribute" in dom


def test_the_summarys_what_if_prediction_is_the_clis(demo_store, tmp_path):
    """Beside each verdict of a factor the what-if engine knows: the replay's
    predicted saving, the measured one and its interval, as `ablation --predict`."""
    text = _report(demo_store, tmp_path / "cf.html", "--experiment", "counterfactual",
                   "--compare", "loss_down", "--by", "connection")
    said = {m[0]: m[1:] for m in re.findall(
        r"loss_down \(connection=(\w+)\): [^<]*?the what-if replay predicts 0\.0 - 0\.05 = "
        r"([-+][\d.]+) ms, measured ([-+][\d.]+) ms \(95 % interval ([-\d.]+) to ([-\d.]+)\): "
        r"(holds|misses)", text)}
    cli = csv.DictReader(io.StringIO(_tracekit(
        "ablation", "--db", str(demo_store), "--compare", "loss_down", "--by", "connection",
        "--where", "experiment=counterfactual", "--predict", "--format", "csv")))
    rows = {r["connection"]: r for r in cli}
    assert set(said) == set(rows) == {"fresh", "persistent"}
    for conn, (predicted, measured, low, high, holds) in said.items():
        row = rows[conn]
        assert row["predicted_by"] == "replay"
        assert float(predicted) == float(row["predicted_ms"]) != 0
        assert float(measured) == float(row["saved_ms"])
        assert f"{float(low)}-{float(high)}" == row["saved_ci95_ms"]
        assert holds == row["prediction"]


# Drives the request explorer in the browser: hovers a request's bar (its
# tooltip must show), clicks it, then clicks another request's table row;
# after each, what the explorer's views hold is written into the page.
PROBE = """<script>
(async () => {
  const out = {};
  try {
    let view, chart;
    for (const [id, promise] of Object.entries(window.tracekitCharts)) {
      const v = await promise;
      if (document.getElementById(id).dataset.picked) [view, chart] = [v, document.getElementById(id)];
    }
    const marks = name => [...chart.querySelectorAll("g." + name + " > path")];
    const state = () => ({picked: chart.dataset.picked,
      red: marks("concat_0_marks").filter(p => p.getAttribute("fill") === "#d62728")
             .map(p => p.__data__.datum.request),
      spans: marks("concat_1_concat_0_marks").map(p => p.__data__.datum.label),
      frames: marks("concat_1_concat_1_marks").map(p => p.__data__.datum.frame)});
    out.first = state();
    const bar = marks("concat_0_marks").find(p => p.__data__.datum.request === CLICK);
    const box = bar.getBoundingClientRect();
    const at = {bubbles: true, cancelable: true, view: window,
                clientX: box.x + box.width / 2, clientY: box.y + box.height / 2};
    for (const t of ["pointerover", "pointermove", "mouseover", "mousemove"])
      bar.dispatchEvent(new (t.startsWith("pointer") ? PointerEvent : MouseEvent)(t, at));
    await view.runAsync();
    const tip = document.getElementById("vg-tooltip-element");
    out.tooltip = tip && tip.classList.contains("visible") ? tip.textContent : null;
    bar.dispatchEvent(new MouseEvent("click", at));
    await view.runAsync(); await new Promise(r => setTimeout(r, 50));
    out.clicked = state();
    document.querySelector('tr[data-request="' + ROW + '"]').click();
    await view.runAsync(); await new Promise(r => setTimeout(r, 50));
    out.row = state();
    out.picked_rows = [...document.querySelectorAll("tr.picked")].map(tr => tr.dataset.request);
    const dot = marks("concat_1_concat_1_marks")[0], spot = dot.getBoundingClientRect();
    const there = {...at, clientX: spot.x + spot.width / 2, clientY: spot.y + spot.height / 2};
    for (const t of ["pointerover", "pointermove", "mouseover", "mousemove"])
      dot.dispatchEvent(new (t.startsWith("pointer") ? PointerEvent : MouseEvent)(t, there));
    await view.runAsync();
    out.packet_tooltip = tip && tip.classList.contains("visible") ? tip.textContent : null;
  } catch (e) { out.error = String(e); }
  document.body.dataset.probe = JSON.stringify(out);
})();
</script>"""


def _shown_frames(con, key, per_request):
    """The frames the explorer draws for a request, from the packets table: its
    flow's frames within its start and end, every k-th past `per_request` and
    the last (explorer.py's rule, counted here in Python)."""
    frames = [f for (f,) in con.execute("""
        SELECT p.frame FROM requests r JOIN packets p ON p.capture_id = r.capture_id
            AND p.flow_id = r.flow_id AND p.ts_ns >= r.start_ns AND p.ts_ns <= r.end_ns
        WHERE r.request_key = ? ORDER BY p.ts_ns, p.frame""", [key]).fetchall()]
    k = max(1, -(-len(frames) // per_request))
    return [f for i, f in enumerate(frames) if i % k == 0 or i == len(frames) - 1]


@needs_chromium
def test_a_click_on_a_request_or_its_row_drives_its_spans_and_packets(report, demo_store,
                                                                       tmp_path):
    import html
    import json

    import duckdb

    from tracekit.presentation import explorer
    text = report.read_text()
    keys = [html.unescape(k) for k in re.findall(r'<tr data-request="([^"]*)"', text)]
    with duckdb.connect(str(demo_store), read_only=True) as con:
        per_request = max(explorer.MIN_PER_REQUEST, explorer.PACKET_BUDGET // len(keys))
        frames = {k: _shown_frames(con, k, per_request) for k in keys}
        spans = {k: [s for (s,) in con.execute(
            "SELECT span || coalesce(' (' || detail || ')', '') FROM attribution "
            "WHERE request_key = ? AND ns <> 0", [k]).fetchall()] for k in keys}
    first = json.loads(re.search(r'"params":\[\{"name":"picked","value":("[^"]*")', text).group(1))
    with_packets = [k for k in keys if frames[k] and k != first]
    click, row = with_packets[0], with_packets[-1]
    end = text.rindex("</body>")
    probe = tmp_path / "probe.html"
    probe.write_text(text[:end] + PROBE.replace("CLICK", json.dumps(click))
                     .replace("ROW", json.dumps(row)) + text[end:])
    dom = dump(probe)
    check_drawn(dom)  # (no error, no console error, every chart drawn)
    said = json.loads(html.unescape(re.search(r'data-probe="([^"]*)"', dom).group(1)))
    assert "error" not in said, said["error"]
    assert said["first"]["picked"] == first and first in keys
    # hovering a bar shows its tooltip, naming the request
    assert said["tooltip"] and click in said["tooltip"] and "measured_ms" in said["tooltip"]
    for step, key in (("first", first), ("clicked", click), ("row", row)):
        state = said[step]
        assert state["picked"] == key and state["red"] == [key], step
        assert state["frames"] == frames[key], step  # its flow, its time, nothing else
        assert sorted(state["spans"]) == sorted(spans[key]), step
    assert said["clicked"]["frames"] != said["row"]["frames"]
    assert said["picked_rows"] == [row]
    # a packet's tooltip names its frame, Wireshark's frame.number
    assert said["packet_tooltip"].replace(",", "").startswith(
        f"frame (Wireshark frame.number){frames[row][0]}capture"), said["packet_tooltip"]
