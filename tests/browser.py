"""Debian's chromium, headless and offline, opening a page: the DOM after
the scripts ran (`dump`) and a screenshot (`screenshot`). Each call gets a
fresh profile; the flags keep the browser from reaching any network."""

import re
import shutil
import subprocess
import tempfile

import pytest

needs_chromium = pytest.mark.skipif(not shutil.which("chromium"),
                                    reason="Debian's chromium is not installed")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--proxy-server=127.0.0.1:9",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=30000"]


def _chromium(*args):
    with tempfile.TemporaryDirectory(prefix="tk-chromium-") as profile:
        return subprocess.run(["chromium", *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=240)


def dump(path):
    """The page's DOM once its scripts ran."""
    r = _chromium("--dump-dom", path.resolve().as_uri())
    assert "<html" in r.stdout, r.stderr[-800:]
    return r.stdout


def screenshot(path, png, width=1200, height=1000):
    r = _chromium(f"--window-size={width},{height}", f"--screenshot={png}",
                  path.resolve().as_uri())
    assert png.exists(), r.stderr[-800:]
    return png


def check_drawn(dom):
    """No error met by the page; every chart drawn as SVG with marks. The chart ids."""
    errors = re.search(r'<pre id="errors"[^>]*>(.*?)</pre>', dom, re.S)
    assert errors is not None and errors.group(1).strip() == "", errors.group(1)
    charts = re.findall(r'<div id="(chart\d+)" class="chart[^"]*"([^>]*)>(.*?)</div>\s*'
                        r'(?:<figcaption|</figure)', dom, re.S)
    for cid, attrs, inner in charts:
        assert 'data-rendered="yes"' in attrs, cid
        assert "<svg" in inner and ("<path" in inner or "<rect" in inner), cid
    return [c[0] for c in charts]
