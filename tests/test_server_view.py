"""A request captured at the server and timed by the client's log (issue #26
item 5): the response's trip back is propagation, the bottleneck's transfer
and its queue -- not client_idle; the request's trip here is propagation, not
connect_tcp; a cubic sender does not pace. Checked against the same runs
captured at the client: the same gap, the same bottleneck rate."""

import os
import shutil

import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli import main

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("tcpdump"),
                                reason="the lab needs root (network namespaces) and tcpdump")

EXPERIMENT = """
name = "server-view"
workload = "tts"
trials = 1
requests = 2
seed = 5

[path]
rtt_ms = 60
rate_mbps = 10

[fixed]
processing_ms = 150

[factors]
connection = ["fresh", "persistent"]
"""


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("server-view")
    (tmp / "exp.toml").write_text(EXPERIMENT)
    r = CliRunner().invoke(main, ["lab", "run", str(tmp / "exp.toml"), "--out", str(tmp / "runs"),
                                  "--db", str(tmp / "client.duckdb")])
    assert r.exit_code == 0, r.output
    for run in sorted((tmp / "runs").glob("server-view-*")):  # the server's capture, the client's log
        r = CliRunner().invoke(main, ["ingest", str(run / "server.pcap"), str(run / "client-events.jsonl"),
                                      str(run / "server-events.jsonl"), "--label", f"run={run.name}",
                                      "--db", str(tmp / "server.duckdb")])
        assert r.exit_code == 0, r.output
    out = {}
    for side in ("client", "server"):
        with tracekit.open(str(tmp / f"{side}.duckdb")) as s:
            s.analyze()
        out[side] = tmp / f"{side}.duckdb"
    return out


def _rows(path, sql):
    with tracekit.open(str(path), read_only=True) as s:
        return s.con.execute(sql).fetchall()


def test_the_trips_at_the_server_are_propagation_and_queueing(stores):
    spans = _rows(stores["server"], """
        SELECT r.request_key, r.connection, a.span, a.phase, sum(a.ns) / 1e6 FROM attribution a
        JOIN requests r USING (request_key) WHERE r.vantage = 'server' GROUP BY ALL""")
    keys = {s[0] for s in spans}
    assert len(keys) == 4
    per = {(k, span, phase): ms for k, _, span, phase, ms in spans}
    for key in keys:
        # the trips: 30 ms each way (the path's 60 ms RTT, measured), not client_idle
        assert per[(key, "propagation", "setup")] + per[(key, "propagation", "tail")] == \
            pytest.approx(60, abs=3)
        assert per.get((key, "client_idle", "tail"), 0) < 10, key
        assert per.get((key, "pacing", "download"), 0) == 0  # cubic, no fq: it does not pace
    fresh = [k for k, c, *_ in spans if c == "fresh"]
    for key in fresh:  # the handshake is one round trip; the request's trip is not in it
        assert per[(key, "connect_tcp", "setup")] == pytest.approx(60, abs=3)


def test_both_ends_give_the_same_gap_and_the_same_bottleneck(stores):
    def gaps(path):
        return dict(_rows(path, "SELECT r.run || ':' || r.request, b.gap_ns / 1e6 FROM bounds b "
                                "JOIN requests r USING (request_key) WHERE r.source = 'events'"))
    client, server = gaps(stores["client"]), gaps(stores["server"])
    assert client.keys() == server.keys() and len(client) == 4
    for key in client:
        assert server[key] == pytest.approx(client[key], abs=5), key
    rates = _rows(stores["server"], "SELECT rate_bps, known FROM bottleneck WHERE direction = 's2c'")
    rates += [r for r in _rows(stores["client"], """SELECT rate_bps, known FROM bottleneck
        JOIN captures c USING (capture_id) WHERE direction = 's2c' AND c.file_name = 'client.pcap'""")]
    assert len(rates) >= 6
    for rate, known in rates:  # the lab's 10 Mbit/s (IP bytes)
        assert known and rate == pytest.approx(10e6, rel=0.03)
    # one account at the server too
    off = _rows(stores["server"], """
        SELECT b.request_key FROM bounds b JOIN attribution a USING (request_key)
        WHERE b.bound_ns IS NOT NULL GROUP BY b.request_key, b.bound_ns, b.duration_ns
        HAVING sum(a.ns) FILTER (NOT a.irreducible) <> b.duration_ns - b.bound_ns""")
    assert off == []
