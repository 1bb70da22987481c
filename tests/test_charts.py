"""Charts: a self-contained HTML file (no network needed to view it) and a PNG."""

import shutil
import subprocess

import pytest
from conftest import SHARED, needs_shared

from tracekit.pipeline.analyze import analyze
from tracekit.presentation import charts

pytestmark = needs_shared
pytest.importorskip("altair")


@pytest.mark.parametrize("kind", charts.KINDS)
def test_chart_files(shared_db, tmp_path, kind):
    con, ids = shared_db
    analyze(con)
    cid = ids["zeek__206_example_a.pcap"]
    html, png = charts.save(charts.build(con, kind, cid, 1, "s2c"), str(tmp_path / kind))
    with open(html) as f:
        text = f.read()
    assert "<script src=" not in text  # the Vega libraries are inlined
    assert '"$schema"' in text or "vega" in text
    with open(png, "rb") as f:
        head = f.read(8)
    assert head == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / f"{kind}.png").stat().st_size > 20_000


def test_unknown_flow_is_a_clear_error(shared_db):
    con, ids = shared_db
    analyze(con)
    with pytest.raises(Exception, match="no flow 999"):
        charts.build(con, "rtt", ids["zeek__206_example_a.pcap"], 999, "s2c")


def test_a_udp_flow_is_a_clear_error(shared_db):
    con, ids = shared_db
    analyze(con)
    cid = ids["tcpdump__quic_retry.pcap"]
    with pytest.raises(Exception, match="is UDP; the charts draw TCP flows"):
        charts.build(con, "time-sequence", cid, 0, "s2c")


def test_every_span_has_a_colour():
    """The charts colour every span attribution.sql can produce (unexplained in black)."""
    import re

    from tracekit.presentation.ablation_charts import SPAN_COLORS
    from tracekit.store.db import analyses_dir
    sql = (analyses_dir() / "attribution.sql").read_text()
    spans = set(re.findall(r"\('[a-z_]+', \d+, '([a-z_]+)', '(?:setup|upload|wait|download|tail)'", sql))
    spans |= {"loss_recovery", "unattributed"}
    assert len(spans) > 15 and spans <= set(SPAN_COLORS), spans - set(SPAN_COLORS)
    assert SPAN_COLORS["unexplained"] == "#000000"


def test_decimate_keeps_each_pixels_extremes():
    """Per-pixel min/max: every pixel column's lowest and highest value survive,
    at most two rows per column, and a short series is left as it is."""
    import numpy as np
    import pandas as pd
    rng = np.random.default_rng(7)
    df = pd.DataFrame({"t": np.sort(rng.uniform(0, 10, 50_000)), "y": rng.normal(size=50_000)})
    out = charts.decimate(df, "y", 0.0, 10.0, width=100)
    assert len(out) <= 200
    pixel = (df.t / 10 * 100).clip(0, 99).astype(int)
    kept = (out.t / 10 * 100).clip(0, 99).astype(int)
    assert (df.groupby(pixel).y.max() == out.groupby(kept).y.max()).all()
    assert (df.groupby(pixel).y.min() == out.groupby(kept).y.min()).all()
    assert charts.decimate(df.head(100), "y", 0.0, 10.0) is not None
    assert len(charts.decimate(df.head(100), "y", 0.0, 10.0)) == 100


def test_a_long_flow_is_drawn_from_aggregates_and_a_stretch_in_detail(shared_db, monkeypatch):
    """With the detail threshold lowered, the segments become one rule per pixel
    and class that still covers the flow's lowest to highest sequence number
    (checked against tcp_analysis directly); a --from/--to stretch sets the
    shared time axis of the graph and the state ribbon."""
    con, ids = shared_db
    analyze(con)
    cid = ids["zeek__206_example_a.pcap"]
    monkeypatch.setattr(charts, "DETAIL", 20)
    spec = charts.time_sequence(con, cid, 1, "s2c").to_dict()
    data = spec["datasets"]
    segs = next(v for v in data.values() if v and "segments" in v[0])
    (n, lo, hi), = con.execute("SELECT count(*), min(rel_seq), max(rel_end) FROM tcp_analysis "
                               "WHERE capture_id = ? AND flow_id = 1 AND NOT from_client "
                               "AND segment IS NOT NULL", [cid]).fetchall()
    assert n > 20 and len(segs) < n and len(segs) <= 5 * charts.WIDTH
    assert sum(r["segments"] for r in segs) == n
    assert min(r["seq"] for r in segs) == lo and max(r["seq_end"] for r in segs) == hi
    part = charts.time_sequence(con, cid, 1, "s2c", 0.0, 0.05).to_dict()
    domains = [layer["encoding"]["x"]["scale"]["domain"] for layer in
               part["vconcat"][0]["layer"] + [part["vconcat"][1]] if "scale" in layer["encoding"]["x"]]
    assert domains and all(d == [0.0, 0.05] for d in domains)


def test_every_limitation_state_has_one_colour():
    from tracekit.core.spans import STATE_COLORS
    from tracekit.store.schema import STALL_STATES
    assert set(STATE_COLORS) == set(STALL_STATES)
    assert len(set(STATE_COLORS.values())) == len(STATE_COLORS)


@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark is not installed")
@pytest.mark.parametrize("detail", [20, 4000])
def test_the_tooltips_wireshark_filter_selects_the_frames_it_names(shared_db, monkeypatch,
                                                                    detail):
    """Each segment rule's tooltip names its frames (a range where a pixel
    aggregates) and a display filter; tshark, run with that filter on the
    capture, selects the sender's data segments in that range, as tracekit has them."""
    con, ids = shared_db
    analyze(con)
    name = "zeek__206_example_a.pcap"
    cid = ids[name]
    monkeypatch.setattr(charts, "DETAIL", detail)
    spec = charts.time_sequence(con, cid, 1, "s2c").to_dict()
    segs = next(v for v in spec["datasets"].values() if v and "frames" in v[0])
    expression, = {t["calculate"] for layer in spec["vconcat"][0]["layer"]
                   for t in layer.get("transform", ()) if t.get("as") == "wireshark"}
    # the Vega expression, evaluated as the browser does: 'frame.number in {' +
    # replace(datum.frames, '-', '..') + '} and <the sender's filter>'
    head, tail = "'frame.number in {' + replace(datum.frames, '-', '..') + '} and ", "'"
    assert expression.startswith(head) and expression.endswith(tail)
    sender = expression[len(head):-1]
    assert "129.174.93.161" in sender.split(" and ")[0]  # ip.src: the server, data s2c
    for r in segs:
        r["wireshark"] = f"frame.number in {{{r['frames'].replace('-', '..')}}} and {sender}"
    assert all(r["frames"] == (f"{r['frame']}" if r["frame"] == r["last_frame"]
                               else f"{r['frame']}-{r['last_frame']}") for r in segs)
    picks = sorted(segs, key=lambda r: -r["segments"])[:2] + [segs[len(segs) // 2]]
    assert (picks[0]["segments"] > 1) == (detail == 20)
    for r in picks:
        theirs = subprocess.run(["tshark", "-n", "-r", str(SHARED / name), "-Y", r["wireshark"],
                                 "-T", "fields", "-e", "frame.number"],
                                capture_output=True, text=True, check=True).stdout.split()
        ours = con.execute("SELECT frame FROM tcp_analysis WHERE capture_id = ? AND flow_id = 1 "
                           "AND NOT from_client AND segment IS NOT NULL AND frame BETWEEN ? AND ? "
                           "ORDER BY frame", [cid, r["frame"], r["last_frame"]]).fetchall()
        assert [int(f) for f in theirs] == [f for f, in ours] and len(ours) >= r["segments"]
