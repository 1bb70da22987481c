"""Ingesting a manifest's many runs in one command (tracekit/pipeline/ingest.py)."""

import os
from pathlib import Path

from tracekit.pipeline import captures as ingest
from tracekit.pipeline.ingest import ingest_runs
from tracekit.store.db import connect


def test_a_manifests_runs_decide_on_compiled_kernels_together(tmp_path, monkeypatch):
    """Whether compiled kernels pay for their start-up is decided on all the
    runs' captures at once: each of the chapter's 240 runs alone is too small,
    and scanning them all as Python took 25 s of a 45 s ingest."""
    samples = Path(__file__).resolve().parents[1] / "captures"
    runs = [([str(samples / f"lossy-download-{side}.pcap")], [], {"run": side})
            for side in ("client", "server")]
    asked = []
    monkeypatch.setattr(ingest, "prefer_compiled", asked.append)
    con = connect(tmp_path / "s.duckdb")
    out = ingest_runs(con, runs)
    both = sum(os.stat(r[0][0]).st_size for r in runs)
    assert asked == [both]  # once, for all of them
    # one call for every run's captures, each with its own run's labels
    assert [(lab["run"], [os.path.basename(s.path) for s in caps]) for lab, caps, _ in out] == \
        [("client", ["lossy-download-client.pcap"]), ("server", ["lossy-download-server.pcap"])]
    assert con.execute("SELECT file_name, labels['run'] FROM captures ORDER BY capture_id")\
        .fetchall() == [("lossy-download-client.pcap", "client"),
                        ("lossy-download-server.pcap", "server")]
    con.close()


def test_portless_requests_are_counted_per_log(tmp_path):
    """A request whose events carry no local port cannot be joined to its flow;
    each log's summary counts its own (from its rows, not the whole table)."""
    from tracekit.pipeline.logs import load_logs
    from tracekit.readers.events import read_logs

    t = 1_780_000_000_000_000_000
    one = tmp_path / "one.jsonl"
    one.write_text(f'{{"ts_ns": {t}, "kind": "request_start", "request": "a"}}\n'
                   f'{{"ts_ns": {t + 1}, "kind": "request_start", "request": "b", "local_port": 4000}}\n'
                   f'{{"ts_ns": {t + 2}, "kind": "response_end", "request": "c"}}\n')
    two = tmp_path / "two.jsonl"
    two.write_text(f'{{"ts_ns": {t}, "kind": "request_start", "request": "a", "local_port": 4001}}\n'
                   f'{{"ts_ns": {t + 5}, "kind": "request_start", "request": "d"}}\n'
                   f'{{"ts_ns": {t + 6}, "kind": "request_start", "request": "e"}}\n')
    con = connect(tmp_path / "s.duckdb")
    summaries = load_logs(con, read_logs([str(one), str(two)]))
    assert [s.portless_requests for s in summaries] == [1, 2]
    con.close()
