"""Spans at a server capture against what the run was (tests/data/spans-line,
made by hand: a delay line, a server that sleeps 120 ms and writes its
response at once, the delay line's drop log).

- A response's last flight with a drop in it: the sender, with everything
  written and data in flight, waited for the loss to show -- loss
  recovery, not the server idle (it read 41 ms of `server_idle` on each
  request).
- A warm response leaves the server in about 1 ms and crosses the
  bottleneck after it: its headers' time lies in the tail, before the
  queueing (it read `headers` 0 and the queueing 5.4 ms longer).
"""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli import main

from test_gap_account import gap_residuals

RUNS = Path(__file__).parent / "data" / "spans-line"


def _store(tmp_path_factory, tag):
    db = tmp_path_factory.mktemp(tag) / "s.duckdb"
    files = [RUNS / f"s-{tag}.pcap", RUNS / f"client-events-{tag}.jsonl",
             RUNS / f"server-events-{tag}.jsonl"]
    for args in (["ingest", *map(str, files)], ["analyze"]):
        r = CliRunner().invoke(main, [*args, "--db", str(db)])
        assert r.exit_code == 0, r.output
    return db


def spans(db):
    """{request: {span: ms}} and the requests' measured ms."""
    with tracekit.open(str(db), read_only=True) as s:
        rows = s.con.execute("""SELECT a.request_key, a.span, sum(a.ns) / 1e6, b.duration_ns / 1e6
                                FROM attribution a JOIN bounds b USING (request_key)
                                GROUP BY ALL""").fetchall()
        assert gap_residuals(s.con)[1] == []
    out, measured = {}, {}
    for key, span, ms, total in rows:
        out.setdefault(key, {})[span] = ms
        measured[key] = total
    return out, measured


@pytest.fixture(scope="module")
def lossy(tmp_path_factory):
    return spans(_store(tmp_path_factory, "nl-fresh"))


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    return spans(_store(tmp_path_factory, "nq-persistent"))


def test_a_lossy_last_flight_is_loss_recovery_not_the_server_idle(lossy):
    by_request, _ = lossy
    truth = json.loads((RUNS / "truth-nl-fresh.json").read_text())
    ports = {r["request"]: r["local_port"] for r in truth["client"]}
    drops = {}
    for line in (RUNS / "drops-nl-fresh.jsonl").read_text().splitlines():
        d = json.loads(line)
        drops[d["dport"]] = drops.get(d["dport"], 0) + 1
    assert len(by_request) == 6
    for key, got in by_request.items():
        assert drops[ports[key.split(":", 1)[1]]] == 3  # each response lost 3 segments
        assert got.get("server_idle", 0) == 0  # the server wrote it all after its 120 ms
        assert got["processing"] == pytest.approx(120.2, abs=0.3)
        # the last flight waited for its drops to show: about one round trip
        assert 35 < got["loss_recovery"] < 70


def test_a_warm_response_s_headers_lie_in_the_tail(warm):
    by_request, measured = warm
    truth = json.loads((RUNS / "truth-nq-persistent.json").read_text())
    own = {f"log1:{r['request']}": r["own_ms"] for r in truth["client"]}
    size = truth["size"] + 83  # the body and the server's header
    headers = size / 1448 * 52 * 8e3 / truth["rate"]  # ms: 52 bytes of IP and TCP a segment
    warm_ones = [k for k in by_request if not k.endswith("-0")]
    assert len(warm_ones) == 5
    for key in warm_ones:
        got = by_request[key]
        assert measured[key] == pytest.approx(own[key], abs=0.1)
        assert got["headers"] == pytest.approx(headers, rel=0.05)
        assert got.get("queueing", 0) < 3  # (the 2 MB queue was empty: no other flow)
        assert got.get("window_waiting", 0) == 0 and got.get("server_idle", 0) == 0
