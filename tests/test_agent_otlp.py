"""A real OpenTelemetry trace: the lab's agent loop (tracekit.lab.agent)
runs against its server on localhost -- http.client over kernel TCP, the
OpenTelemetry SDK's OTLP JSON file exporter writing its spans -- and the
trace ingests into the same tasks and rounds as the loop's own JSON Lines
log, within 1 ms. Nothing here is hand-written JSON but the damaged lines."""

import json
import subprocess
import sys

import pytest

from tracekit import api
from tracekit.lab.agentpath import _env
from tracekit.lab.netns import realtime_prefix
from tracekit.readers.events import read_log

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.json.file")


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    work = tmp_path_factory.mktemp("otlp")
    server = subprocess.Popen([*realtime_prefix(), sys.executable, "-m", "tracekit.lab.agent", "serve", "0",
                               str(work / "server.jsonl"), "0.005", "1", "otel"],
                              stdout=subprocess.PIPE, text=True, env=_env())
    try:
        port = int(server.stdout.readline().split()[1])
        cfg = {"log": str(work / "client.jsonl"), "otlp": str(work / "trace.jsonl"),
               "run": "otel", "server": "127.0.0.1", "port": port, "rounds": 4, "tasks": 2,
               "upload_bytes": 20_000, "edge_s": 0.005, "action_s": 0.002, "reconnect_s": 0.02,
               "disconnect_after": 3, "retry": "reexecute", "deadline_s": 1.0}
        (work / "client.json").write_text(json.dumps(cfg))
        # at the lab's real-time priority where allowed: a busy machine must not
        # come between a span's start and the log's line beside it
        subprocess.run([*realtime_prefix(), sys.executable, "-m", "tracekit.lab.agent", "client",
                        str(work / "client.json")], check=True, env=_env(), timeout=120)
    finally:
        server.terminate()
        server.wait()
        server.stdout.close()
    stores = {}
    for name, files in (("log", ["client.jsonl", "server.jsonl"]), ("otlp", ["trace.jsonl"])):
        db = str(work / f"{name}.duckdb")
        api.ingest(db, [str(work / f) for f in files])
        api.analyze(db)
        stores[name] = db
    return work, stores


def frames(db, table, order):
    with api.open(db, read_only=True) as store:
        return store.sql(f"SELECT * FROM {table} ORDER BY {order}").fetchdf()


def test_the_sdk_trace_gives_the_logs_tasks_and_rounds(traced):
    work, stores = traced
    first = (work / "trace.jsonl").read_text().splitlines()[0]
    assert '"resourceSpans"' in first and '"telemetry.sdk.name"' in first  # the SDK wrote it
    assert read_log(str(work / "trace.jsonl")).format == "otlp"
    log, otlp = (frames(stores[k], "agent_rounds", "start_ns") for k in ("log", "otlp"))
    assert len(log) == len(otlp) == 2 * 5  # 4 rounds and round 3 twice, per task
    assert (otlp["round"].tolist() == log["round"].tolist()
            and otlp["attempt"].tolist() == log["attempt"].tolist())
    assert (otlp["round_ns"] - log["round_ns"]).abs().max() < 1_000_000
    assert (otlp["edge_ns"] - log["edge_ns"]).abs().max() < 1_000_000
    # the client's trace has no server spans: upload + model + network is its request
    both = log["upload_ns"] + log["model_ns"] + log["network_ns"]
    assert (otlp["network_ns"] - both).abs().max() < 1_000_000
    log_t, otlp_t = (frames(stores[k], "tasks", "start_ns") for k in ("log", "otlp"))
    assert len(log_t) == len(otlp_t) == 2 and set(otlp_t["run"]) == {"otel"}
    assert (otlp_t["duration_ns"] - log_t["duration_ns"]).abs().max() < 1_000_000
    for t in (log_t, otlp_t):
        # the retry acted again: round 3's action executed twice, one lost round
        assert t["lost_rounds"].tolist() == [1, 1] and t["duplicate_actions"].tolist() == [1, 1]
        assert t["reexecuted_retries"].tolist() == [1, 1] and t["deadline_ns"].tolist() == [10**9] * 2
    assert log_t["committed_round"].tolist() == [2, 2]  # only the server's log says so


def test_a_damaged_trace_is_counted_not_fatal(traced, tmp_path):
    work, _ = traced
    lines = (work / "trace.jsonl").read_text().splitlines()
    broken = json.loads(lines[0])
    del broken["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["endTimeUnixNano"]
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("\n".join([lines[0][: len(lines[0]) // 2], json.dumps(broken),
                                  '{"resourceSpans": "x"}', *lines[1:]]) + "\n")
    parsed = read_log(str(damaged), fmt="otlp")
    problems = dict(parsed.malformed)
    assert problems[1].startswith("not JSON") and "has no endTimeUnixNano" in problems[2]
    assert problems[3] == "not an OTLP trace (no resourceSpans)"
    assert parsed.table.num_rows > 0


def test_hostile_spans_are_counted_each_with_its_reason(tmp_path):
    """Shapes a damaged or hostile exporter could write: each span that cannot
    be read is a malformed record; the good span beside them is kept."""
    good = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "execute_tool click", "kind": 1,
            "startTimeUnixNano": "1796394050614325219", "endTimeUnixNano": "1796394050616325219",
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                           {"key": "gen_ai.tool.call.id", "value": {"stringValue": "t-1"}},
                           {"key": "tracekit.round", "value": {"intValue": "x"}},
                           {"key": 7, "value": {"kvlistValue": "no"}}],
            "events": "not a list"}
    hostile = [good, "a string", {"spanId": ["x"], "traceId": ["y"]},
               {**good, "spanId": "ef" * 8, "startTimeUnixNano": "1.5e18"},
               {**good, "spanId": "01" * 8, "endTimeUnixNano": "1796394050000000000"},
               {**good, "spanId": "02" * 8, "traceId": None}]
    doc = {"resourceSpans": [{"resource": {"attributes": "none"},
                              "scopeSpans": [{"spans": hostile}, "x", {"spans": 5}]}, 3]}
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc, indent=1))
    parsed = read_log(str(path))
    assert parsed.format == "otlp"
    reasons = dict(parsed.malformed)
    assert reasons[2] == "a span that is not a JSON object"
    assert "span None has no startTimeUnixNano" == reasons[3]  # nor a trace id
    assert "has no startTimeUnixNano" in reasons[4]  # "1.5e18": not an integer
    assert "ends before it starts" in reasons[5] and "has no traceId" in reasons[6]
    kinds = parsed.table.column("kind").to_pylist()
    assert kinds == ["action_start", "action_end"]  # the good span, its round unreadable
