"""tracekit report in a real browser: Debian's chromium, headless, with the
network cut off, opens the page; no error; every chart drawn as SVG; the
tables hold the CLI's numbers; a screenshot is kept under the test's tmp dir."""

import csv
import io
import re
import shutil
import subprocess
import sys

import pytest

needs_chromium = pytest.mark.skipif(not shutil.which("chromium"),
                                    reason="Debian's chromium is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _tracekit(*args, cwd=None):
    r = subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True,
                       text=True, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _chromium(*args):
    offline = ["--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND"]
    return subprocess.run(["chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
                           "--disable-dev-shm-usage", *offline, *args],
                          capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def report(demo_store, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    said = _tracekit("report", "--db", str(demo_store), "--run", "cross-region",
                     "--compare", "path", "--by", "connection", "--levels", "direct,tunnel",
                     "--out", str(out))
    assert said.startswith(f"wrote {out}")
    return out


def test_the_page_is_self_contained(report):
    text = report.read_text()
    # nothing is fetched: no external script, style or image
    assert not re.search(r"""(src|href)=["']https?://""", text)
    assert text.count("<figure>") >= 5


@needs_chromium
def test_every_chart_renders_offline_without_errors(report, tmp_path):
    dom = _chromium("--virtual-time-budget=20000", "--dump-dom", report.as_uri()).stdout
    assert "<html" in dom
    errors = re.search(r'<pre id="errors"[^>]*>(.*?)</pre>', dom, re.S)
    assert errors is not None and errors.group(1).strip() == "", errors.group(1)
    charts = re.findall(r'<div id="(chart\d+)" class="chart[^"]*"([^>]*)>(.*?)</div>\s*<figcaption',
                        dom, re.S)
    assert len(charts) >= 5
    for cid, attrs, inner in charts:
        assert 'data-rendered="yes"' in attrs, cid
        assert "<svg" in inner and ("<path" in inner or "<rect" in inner), cid
    shot = tmp_path / "report.png"
    r = _chromium("--window-size=1200,4000", f"--screenshot={shot}", "--virtual-time-budget=20000",
                  report.as_uri())
    assert shot.exists() and shot.stat().st_size > 20_000, r.stderr[-500:]


def test_the_tables_hold_the_clis_numbers(report, demo_store):
    text = report.read_text()
    out = _tracekit("attribute", "--db", str(demo_store), "--run", "cross-region-001",
                    "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows
    for row in rows:
        assert f"<td>{row['request']}</td>" in text
        assert f"<td>{row['measured_ms']}</td>" in text and f"<td>{row['bound_ms']}</td>" in text
    ablation = _tracekit("ablation", "--db", str(demo_store), "--compare", "path", "--by",
                         "connection", "--levels", "direct,tunnel", "--where",
                         "experiment=cross-region", "--format", "csv")
    for row in csv.DictReader(io.StringIO(ablation)):
        assert f"<td>{row['ratio']}</td>" in text and f"<td>{row['ci95']}</td>" in text
