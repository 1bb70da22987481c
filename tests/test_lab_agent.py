"""The agent loop over real kernel TCP (root): two namespaces, the client's
uplink a tbf qdisc at 4 Mbit/s, 3 tasks of 4 rounds uploading 40 kB each.

Independent checks: the client's own perf_counter time of each round against
the spans' sum; the closed form with the upload as the capture counted it;
the redo cost of an injected disconnect against redo_after_disconnect.
The bigger runs (tiers, >= 200 tasks for P(T <= D)) are
tools/agent_evidence.py's."""

import os
import shutil
import statistics
import sys

import pytest

from tracekit import api, model

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces)"),
    pytest.mark.skipif(not shutil.which("tcpdump"), reason="tcpdump is not installed"),
]

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "tools"))
from agent_evidence import frame, run_case, span_check, upload_bits  # noqa: E402

CFG = dict(rounds=4, upload_bytes=40_000, edge_s=0.01, action_s=0.002, model_s=0.03, tasks=3,
           reconnect_s=0.1, deadline_s=0.6)
RATE = 4e6


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tracekit.lab.agentpath import AgentPath
    work = tmp_path_factory.mktemp("agent")
    with AgentPath(RATE) as path:
        clean = run_case(path, str(work / "clean"), **CFG)
        cut = run_case(path, str(work / "cut"), disconnect_after=3, **CFG)
    return clean, cut


def closed_round(db):
    bits, _ = upload_bits(db)
    return CFG["edge_s"] + CFG["action_s"] + CFG["model_s"] + bits / RATE


def test_round_spans_add_up_to_the_clients_own_round_time(runs):
    for db in runs:
        worst, n = span_check(db)
        assert n >= 12 and worst < 1_000_000


def test_rounds_are_linked_to_their_flow(runs):
    clean, _ = runs
    d = frame(clean, "SELECT count(*) AS n, count(flow_id) AS linked, "
                     "count(DISTINCT flow_id) AS flows FROM agent_rounds")
    assert d["n"][0] == 12 and d["linked"][0] == 12 and d["flows"][0] == 3  # one connection a task
    assert upload_bits(clean)[1] >= CFG["upload_bytes"]  # the body and the request's headers


def test_rounds_and_tasks_match_the_closed_form(runs):
    clean, _ = runs
    rounds = frame(clean, "SELECT round_ns / 1e9 AS s FROM agent_rounds")["s"]
    assert statistics.median(rounds) == pytest.approx(closed_round(clean), rel=0.05)
    bits, _ = upload_bits(clean)
    tasks = frame(clean, "SELECT duration_ns / 1e9 AS s, setup_ns / 1e9 AS setup, met FROM tasks")
    setup = statistics.median(tasks["setup"])
    predicted = model.agent_task_time(4, CFG["edge_s"] + CFG["action_s"], CFG["model_s"], setup,
                                      bits, RATE, setup_s=setup)
    assert statistics.median(tasks["s"]) == pytest.approx(predicted, rel=0.05)
    assert predicted < CFG["deadline_s"] and tasks["met"].sum() >= 2


def test_a_disconnect_costs_the_reconnect_and_the_uncommitted_round(runs):
    clean, cut = runs
    t = frame(cut, "SELECT lost_rounds, redo_ns / 1e9 AS redo, committed_round, "
                   "duplicate_actions, reexecuted_retries, retries FROM tasks")
    assert t["lost_rounds"].tolist() == [1, 1, 1] and t["committed_round"].tolist() == [2, 2, 2]
    # the retry asked for the executed action's result: nothing acted twice
    assert t["duplicate_actions"].sum() == 0 and t["reexecuted_retries"].sum() == 0
    assert t["retries"].tolist() == [1, 1, 1]
    predicted = model.redo_after_disconnect(closed_round(clean), 1, CFG["reconnect_s"])
    assert statistics.median(t["redo"]) == pytest.approx(predicted, rel=0.05)


def test_deadline_and_placement_from_the_measured_rounds(runs):
    clean, _ = runs
    with api.open(clean, read_only=True) as store:
        table = store.deadline(4, CFG["deadline_s"], block=2, upload_bits=upload_bits(clean)[0])
        tiers = store.placement([("fast", {"uplink_bps": 40e6, "upload_bits": upload_bits(clean)[0]})],
                                4, CFG["deadline_s"])
    assert table["tasks"][0] == 3 and table["measured_rounds"][0] == 12
    # the uplink the deadline needs, from the measured spans: below the 4 Mbit/s that met it
    assert 0 < table["uplink_needed_mbps"][0] < 4
    measured, fast = tiers["round_s"]
    # a tenfold uplink removes nine tenths of the upload, and nothing else
    upload = upload_bits(clean)[0] / RATE
    assert measured - fast == pytest.approx(0.9 * upload, rel=0.02)


def test_each_round_carries_its_requests_transport_attribution(runs):
    clean, _ = runs
    d = frame(clean, """
        SELECT list_sum(map_values(r.request_spans)) AS spans, q.duration_ns AS request_ns,
            r.upload_ns + r.model_ns + r.network_ns AS inside
        FROM agent_rounds r JOIN requests q USING (request_key)""")
    assert len(d) == 12 and (d["spans"] == d["request_ns"]).all()
    # the request, client start to client end, is the round's upload, model and network
    assert (d["inside"] - d["request_ns"]).abs().max() < 1_000_000


TIERS = """
name = "agent-tiers"
workload = "agent-tasks"
trials = 1
requests = 1
seed = 5
[fixed]
rounds = 3
upload_bytes = 20000
edge_ms = 5
[factors]
tier = ["near", "far"]
[levels.tier.near]
rtt_ms = 10
model_ms = 20
[levels.tier.far]
rtt_ms = 60
model_ms = 5
"""


@pytest.mark.slow
def test_tiers_through_lab_run_over_the_emulated_wan(tmp_path):
    """`tracekit lab run` with the agent-tasks workload: each tier's path and
    model time come back as the transport attribution of every round's request
    (propagation is the emulator's round trip, processing the server's sleep)."""
    from click.testing import CliRunner

    from tracekit.cli import main
    exp = tmp_path / "tiers.toml"
    exp.write_text(TIERS)
    db = str(tmp_path / "lab.duckdb")
    r = CliRunner().invoke(main, ["lab", "run", str(exp), "--out", str(tmp_path / "runs"),
                                  "--db", db])
    assert r.exit_code == 0, r.output
    api.analyze(db)
    d = frame(db, """
        SELECT q.labels['tier'] AS tier, r.round, r.request_spans['propagation'] AS prop,
            r.request_spans['processing'] AS proc, r.model_ns, r.flow_id
        FROM agent_rounds r JOIN requests q USING (request_key) ORDER BY tier, r.round""")
    assert len(d) == 6 and d["flow_id"].notna().all()
    for tier, rtt_ms, model_ms in (("near", 10, 20), ("far", 60, 5)):
        rows = d[d["tier"] == tier]
        assert (rows["prop"] == rtt_ms * 1_000_000).all()
        # the server's model events under the client's request id: its sleep, to the ms
        assert ((rows["proc"] - rows["model_ns"]).abs() < 1_000).all()
        assert (rows["model_ns"] >= model_ms * 1_000_000).all()
        assert (rows["model_ns"] < (model_ms + 20) * 1_000_000).all()  # a sleep may overshoot
