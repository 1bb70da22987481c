"""`tracekit lab run` of the multiplexing workload (tracekit/lab/muxrun.py):
one round of HTTP/2 over TLS 1.3 and HTTP/3, the audio first, ingested with
its labels. Checked against the client's own reads of the same runs, not
against times."""

import pytest
from conftest import LAB_MARKS

pytestmark = LAB_MARKS
pytest.importorskip("h2")
pytest.importorskip("aioquic")

EXPERIMENT = """
name = "mux-test"
workload = "multiplexing"
trials = 1
seed = 3
[path]
rtt_ms = 20
rate_mbps = 1.5
[fixed]
image_bytes = 20000
chunks = 4
scheduling = "priority"
committed = 8192
quickack = 1
[factors]
protocol = ["h2", "h3"]
"""


def test_lab_run_records_and_ingests_both_protocols(tmp_path, monkeypatch):
    from tracekit import api
    from tracekit.lab import netns
    from tracekit.pipeline.analyze import analyze
    from tracekit.store.db import connect
    monkeypatch.setattr(netns, "PREFIX", "tk-mux")   # this test's namespaces, under the lab's tk-
    path = tmp_path / "mux.toml"
    path.write_text(EXPERIMENT)
    db = tmp_path / "t.duckdb"
    spec, manifests, _ = api.lab_run(path, tmp_path / "out", db)
    assert [m["factors"]["protocol"] for m in manifests] == ["h2", "h3"]
    h2, h3 = manifests
    assert {"client_capture", "server_capture", "keylog", "drop_log", "logs"} <= set(h2["files"])
    assert "client_capture" not in h3["files"] and len(h3["files"]["qlogs"]) == 2
    con = connect(db)
    analyze(con)
    rows = con.execute("""
        SELECT s.delivery, s.stream_id, s.chunks, s.ready_ns, s.deliverable_ns, s.read_ns, s.hol_ns
        FROM streams s WHERE s.read_ns IS NOT NULL ORDER BY s.delivery, s.chunks NULLS FIRST""").fetchall()
    assert [(r[0], r[2]) for r in rows] == [("connection", None), ("connection", 4),
                                            ("stream", None), ("stream", 4)]
    for delivery, sid, chunks, ready, deliverable, read, hol in rows:
        assert deliverable <= read and read - deliverable <= max(1_000_000, 0.05 * (read - ready))
        assert hol == 0   # no loss
    con.close()
    # the labels reach the streams: one cell per protocol
    with api.open(db, read_only=True) as store:
        cells = store.stream_ablation(by=("protocol",))
    assert [c.by for c in cells] == [("h2",), ("h3",)] and all(c.n == 1 for c in cells)
