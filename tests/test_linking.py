"""Event requests link to flows without port hints; what cannot be linked says so.

The reference lab runs log local ports; a user's own client often does not.
The same runs with every port field removed (and `bytes`/`mode` in place of
`bytes_down`/`connection`, as other clients write them) must link to the
same flows by time and server address and get the same attribution; a
request no flow can be found for is one `unattributed` span and flagged.
"""

import json
from pathlib import Path

from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.captures import load_captures
from tracekit.pipeline.logs import load_logs as _load_logs
from tracekit.pipeline.runner import run_analysis
from tracekit.readers.events import read_log


def load_logs(con, paths, labels):
    return _load_logs(con, [read_log(str(p)) for p in paths], labels=labels)

LAB = Path(__file__).resolve().parents[1] / "captures" / "lab"
RUNS = ("cross-region-001", "cross-region-002")  # fresh and persistent, direct


def _stripped(path, out):
    lines = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        for key in ("local_port", "remote_port"):
            record.pop(key, None)
        if "bytes_down" in record:
            record["bytes"] = record.pop("bytes_down")
        if "connection" in record:
            record["mode"] = {"fresh": "fresh", "reused": "persistent"}.get(
                record.pop("connection"), "fresh")
        lines.append(json.dumps(record))
    out.write_text("\n".join(lines) + "\n")
    return out


def _store(con, tmp_path, strip):
    for run in RUNS:
        labels = {"run": run}
        load_captures(con, [LAB / run / "client.pcap"], labels=labels)
        for name in ("client-events.jsonl", "server-events.jsonl"):
            src = LAB / run / name
            path = _stripped(src, tmp_path / f"{run}-{name}") if strip else src
            load_logs(con, [path], labels=labels)
    analyze(con)
    return {r[0]: r[1:] for r in con.execute(
        "SELECT request_key, capture_id, flow_id, connection, bytes_down, duration_ns "
        "FROM requests WHERE source = 'events' ORDER BY 1").fetchall()}


def test_requests_link_by_time_and_address_without_ports(tmp_path, tmp_path_factory):
    from tracekit.store.db import connect
    with_ports = _store(connect(tmp_path_factory.mktemp("a") / "a.duckdb"), tmp_path, False)
    con = connect(tmp_path_factory.mktemp("b") / "b.duckdb")
    without = _store(con, tmp_path, True)
    assert len(with_ports) == 4
    assert without == with_ports
    spans = con.execute("SELECT DISTINCT span FROM attribution").fetchall()
    assert ("unattributed",) not in spans


def test_a_request_no_flow_matches_is_unattributed_and_flagged(tmp_path, db):
    log = tmp_path / "lonely.jsonl"
    log.write_text(
        '{"ts": 1795995681747674437, "kind": "request_start", "request": "x", "run": "nowhere"}\n'
        '{"ts": 1795995681947674437, "kind": "request_end", "request": "x", "run": "nowhere"}\n')
    load_captures(db, [LAB / RUNS[0] / "client.pcap"], labels={"run": RUNS[0]})
    load_logs(db, [log], labels={"run": "nowhere"})
    analyze(db)
    rows = db.execute("SELECT span, ns, detail FROM attribution WHERE request_key LIKE 'log%:x'"
                      ).fetchall()
    assert rows == [("unattributed", 200_000_000,
                     "no flow of this request was linked: nothing captured shows its time")]
    columns, view = run_analysis(db, "views/attribute", run=None)
    (row,) = [dict(zip(columns, r)) for r in view if r[0].endswith(":x")]
    assert row["flag"] == "no flow linked"
