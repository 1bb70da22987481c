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
        rows = re.findall(r"<tr><td>(log\d+:r\d+)</td><td>[^<]*</td><td>([^<]*)</td>", text)
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
