"""Charts: a self-contained HTML file (no network needed to view it) and a PNG."""

import pytest
from conftest import needs_shared

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
