"""An upload read at the server: the agent lab's committed runs (each round
POSTs an 80 kB screenshot in one request; real kernel TCP, 20 and 200 ms
paths at 80 and 6.4 Mbit/s), the server's capture with the client's event
log, against the same requests read at the client, where the sender's states
are on the wire.

At the server the client's data arrives spaced by the path and each segment
is ACKed on arrival, so "nothing in flight" there is only what has passed
it. The sender's rule read those gaps as the client having nothing to send:
client_idle 4.29 s of the uploads' 4.70 s (steps/stalls.py, the turnaround
rule, reads them as the client's windows).
"""

import json
from pathlib import Path

import pytest

from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.ingest import ingest, ingest_runs
from tracekit.pipeline.manifests import run_inputs
from tracekit.store.db import connect

LAB = Path(__file__).resolve().parents[1] / "captures" / "lab"
RUNS = ("agent-001", "agent-002", "agent-003", "agent-004")
UPLOAD_SQL = """
SELECT a.span, sum(a.ns) / 1e6 FROM attribution a JOIN requests q USING (request_key)
JOIN rtt_summary r ON r.capture_id = q.capture_id AND r.flow_id = q.flow_id
     AND r.direction = 'c2s'
WHERE a.phase = 'upload' AND r.vantage = ? GROUP BY ALL
"""


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("upload")
    client = connect(str(tmp / "client.duckdb"))
    runs = [m for m in json.loads((LAB / "agent.runs.json").read_text()) if m["run"] in RUNS]
    ingest_runs(client, run_inputs(runs, str(LAB)))
    analyze(client)
    ingest(str(tmp / "server.duckdb"), [str(LAB / run / name) for run in RUNS
                                         for name in ("server.pcap", "client-events.jsonl")])
    server = connect(str(tmp / "server.duckdb"))
    analyze(server)
    yield client, server
    client.close()
    server.close()


def test_the_server_sees_the_clients_upload_as_the_client_does(stores):
    client, server = stores
    at_client = dict(client.execute(UPLOAD_SQL, ["client"]).fetchall())
    at_server = dict(server.execute(UPLOAD_SQL, ["server"]).fetchall())
    (requests,), = server.execute("SELECT count(*) FROM requests").fetchall()
    assert requests == 40, requests
    total = sum(at_server.values())
    assert at_server.get("client_idle", 0) <= 0.02 * total, at_server
    # the transfer is S / B at either end; the rest the sender's windows
    assert abs(at_server["upload_transfer"] - at_client["upload_transfer"]) \
        <= 0.01 * at_client["upload_transfer"], (at_server, at_client)
    rest = {side: sum(v for k, v in d.items() if k != "upload_transfer")
            for side, d in (("client", at_client), ("server", at_server))}
    assert abs(rest["server"] - rest["client"]) <= 0.1 * rest["client"], (at_server, at_client)
