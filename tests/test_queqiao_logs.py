"""Queqiao's outputs as its own repository writes them (tests/data/queqiao,
provenance in its README): the records of Queqiao's visualizer tests and its
capture_metrics test, read by tracekit and compared with the figures that
Queqiao's own dashboard code asserts for the same records."""

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from tracekit.cli import main
from tracekit.readers.events import read_log
from tracekit.readers.events.logfmt import go_duration_ns, parse_line, rfc3339_ns

DATA = Path(__file__).parent / "data" / "queqiao"
T0 = rfc3339_ns("2026-08-18T10:00:00Z")
BENCH_TIME = "2026-08-18T09:30:00Z"


def rows(name, **kw):
    parsed = read_log(str(DATA / name), **kw)
    return parsed, [{**r, "fields": json.loads(r["fields"])} for r in parsed.table.to_pylist()]


def test_go_durations_and_slog_text():
    assert go_duration_ns("2s") == 2_000_000_000
    assert go_duration_ns("1h2m3.5s") == 3_723_500_000_000
    assert go_duration_ns("1.5\u00b5s") == 1_500 and go_duration_ns("250ms") == 250_000_000
    assert go_duration_ns("-0.000000001s") == -1 and go_duration_ns("0") == 0
    assert go_duration_ns("2 s") is None and go_duration_ns("s") is None
    assert parse_line('time=2026-08-18T10:00:00Z msg="a \\"b\\" c" n=3 x=0.5 ok=true d=2s') == {
        "time": "2026-08-18T10:00:00Z", "msg": 'a "b" c', "n": 3, "x": 0.5, "ok": True, "d": "2s"}
    assert rfc3339_ns("2026-08-18T18:00:00.000000001+08:00") == T0 + 1


@pytest.mark.parametrize("name, fmt, events", [
    ("lane-text.log", "queqiao", 2), ("lane-json.log", "queqiao", 2),
    ("flows.log", "queqiao", 2), ("capture-metrics.jsonl", "queqiao", 3),
    ("runtime-json.log", "queqiao", 2), ("runtime-text.log", "queqiao", 2),
    ("lifecycle.log", "queqiao", 3), ("lifecycle-text.log", "queqiao", 1),
    ("metrics.prom", "prometheus", 1), ("scrape.prom", "prometheus", 1),
])
def test_every_record_read_and_detected(name, fmt, events):
    parsed, got = rows(name)
    assert parsed.format == fmt and len(got) == events
    assert parsed.malformed == ([(7, "not a Prometheus sample line (name{labels} value "
                                  "[timestamp])")] if name == "scrape.prom" else [])


def test_text_and_json_runtime_logs_give_the_same_record():
    _, text = rows("runtime-text.log")
    _, js = rows("runtime-json.log")
    assert [r["ts_ns"] for r in text] == [T0, T0 + 5_000_000_000] == [r["ts_ns"] for r in js]
    assert {r["kind"] for r in text + js} == {"queqiao_metrics"}
    second = text[1]["fields"]
    assert second["queqiao_quic_smoothed_rtt_seconds"] == 0.22
    assert second["queqiao_quic_controller_in_recovery"] is True  # typed as slog's JSON would
    assert second["deltas"] == {"queqiao_quic_bytes_sent": 500_000}
    assert js[1]["fields"]["deltas"] == {"queqiao_quic_bytes_received": 5_000_000,
                                         "queqiao_bytes_down_total": 2_500_000,
                                         "queqiao_quic_packets_sent": 1000,
                                         "queqiao_quic_packets_lost": 50}


def test_lane_traces_text_and_json():
    parsed, text = rows("lane-text.log")
    # `lane t=` lines have no wall clock: t (seconds since the process started)
    assert [r["ts_ns"] for r in text] == [1_000_000_000, 2_000_000_000]
    assert parsed.trace_clock_events == 2
    f = text[1]["fields"]
    assert (f["minrtt"], f["srtt"], f["resid"], f["ackwr"]) == (190.0, 220.0, 215.0, 1.0)  # ms
    assert f["deltas"]["sent"] == 200_000 and f["deltas"]["breissued"] == 1500
    assert "acksin" not in f["deltas"]  # per interval already, not a counter
    parsed, js = rows("lane-json.log")
    assert parsed.trace_clock_events == 0 and js[1]["ts_ns"] == T0 + 1_000_000_000
    assert js[1]["fields"]["deltas"] == {"sent": 200_000, "lost": 3}


def test_flow_records_durations_and_fec():
    _, got = rows("flows.log")
    local, remote = (r["fields"] for r in got)
    assert local["duration"] == local["duration_ns"] == 2_000_000_000  # "2s" in the file
    assert got[0]["request"] == "line 1"  # no session or flow id in this record
    assert got[1]["request"] == "abcd/42" and remote["duration_ns"] == 1_000_000_000
    assert (remote["fec_plan_k"], remote["fec_plan_n"], remote["fec_erasure_floor"]) == (80, 120, 0.27)
    assert remote["fec_memoryless"] is False and remote["fec_reason"] == "sized for the loss floor"


def test_capture_metrics_scrapes():
    _, got = rows("capture-metrics.jsonl")
    assert [r["ts_ns"] for r in got] == [T0, T0 + 2_000_000_000, T0]
    assert got[1]["fields"]["deltas"] == {"queqiao_quic_bytes_received": 3_000_000,
                                          "queqiao_quic_bytes_sent": 1_000_000,
                                          "queqiao_quic_bytes_lost": 20_000}
    assert got[2]["fields"]["label"] == "client" and got[2]["fields"]["deltas"] == {}


def test_prometheus_scrapes_keep_labels_and_times():
    _, got = rows("metrics.prom")
    assert got[0]["ts_ns"] == T0
    assert got[0]["fields"]['queqiao_quic_controller_kind{kind="bbr-tuic"}'] == 1
    _, got = rows("scrape.prom")  # the sample's own timestamp (ms) places the scrape
    assert got[0]["ts_ns"] == 1_787_000_000_000 * 1_000_000
    assert got[0]["fields"]["queqiao_active_flows"] == 2


def test_counters_fall_as_the_source_says(tmp_path):
    """A process counter that falls restarted (delta = the new value); a QUIC
    sum that falls lost a connection (delta unknown, null)."""
    base = {"msg": "performance snapshot", "type": "metrics", "role": "client", "pid": 7}
    lines = [dict(base, time=f"2026-08-18T10:00:0{i}Z", queqiao_flows_started_total=a,
                  queqiao_quic_bytes_sent=b) for i, (a, b) in enumerate([(5, 900), (2, 400), (4, 700)])]
    p = tmp_path / "client.log"
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    parsed, got = rows(p)
    assert [r["fields"]["deltas"] for r in got] == [
        {}, {"queqiao_flows_started_total": 2, "queqiao_quic_bytes_sent": None},
        {"queqiao_flows_started_total": 2, "queqiao_quic_bytes_sent": 300}]
    assert (parsed.counter_resets, parsed.negative_deltas) == (1, 1)


def test_timeless_files_are_dated_by_a_stated_time_or_kept_on_their_own_clock(tmp_path):
    db = str(tmp_path / "x.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(DATA / "bench.json"), "--db", db])
    assert r.exit_code == 0, r.output
    assert ("bench.json: 3 events count from the start of their trace" in r.output
            and "date it with --time T" in r.output)
    con = duckdb.connect(db)
    assert con.execute("SELECT clock_source, first_ts_ns, last_ts_ns FROM event_logs"
                       ).fetchall() == [("trace_start", 0, 0)]
    con.close()
    db = str(tmp_path / "y.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(DATA / "bench.json"), str(DATA / "live.tsv"),
                                  "--db", db, "--time", BENCH_TIME])
    assert r.exit_code == 0, r.output
    con = duckdb.connect(db)
    assert con.execute("SELECT format, clock_source FROM event_logs ORDER BY log_id").fetchall() == [
        ("queqiaobench", "stated"), ("queqiao-tsv", "stated")]
    got = con.execute("SELECT kind, run, ts_ns, fields->>'$.path.rtt_ms', fields->>'mbits_per_sec', "
                      "fields->>'complete' FROM events ORDER BY log_id, line").fetchall()
    at = rfc3339_ns(BENCH_TIME)
    assert got == [("queqiaobench_config", None, at, "200", None, None),
                   ("queqiaobench_trial", "queqiao/1/1", at, "200", "80", "true"),
                   ("queqiaobench_summary", "queqiao/1", at, "200", None, None),
                   ("queqiao_harness_trial", "queqiao/1", at, None, "33.2", "true")]


def test_dashboard_figures_match_queqiaos_own(tmp_path):
    """`tracekit queqiao` against the figures Queqiao's visualizer tests assert
    for the same records (parser.test.js)."""
    db = str(tmp_path / "x.duckdb")
    files = ["lane-text.log", "lane-json.log", "runtime-json.log", "runtime-text.log",
             "capture-metrics.jsonl"]
    r = CliRunner().invoke(main, ["ingest", *(str(DATA / f) for f in files), "--db", db])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["queqiao", "--db", db, "--format", "json"])
    assert r.exit_code == 0, r.output
    got = {(x["log"], x["line"]): x for x in json.loads(r.output)}
    lane_text, lane_json, runtime, text, scrape = (got[(n, 2)] for n in range(1, 6))
    # "parses lane traces and derives counter rates"
    assert (lane_text["up_mbps"], lane_text["lost_packets_per_s"], lane_text["packet_loss_pct"],
            lane_text["reissued_bytes_per_s"]) == (1.6, 5, 5, 1500)
    # "parses structured production lane snapshots"
    assert (lane_json["up_mbps"], lane_json["lost_packets_per_s"]) == (1.6, 3)
    # "parses production runtime telemetry in JSON and text formats"
    assert (runtime["down_mbps"], runtime["app_down_mbps"], runtime["packet_loss_pct"]) == (8, 4, 5)
    assert (text["up_mbps"], text["srtt_ms"]) == (0.8, 220)
    # "parses timestamped metrics JSONL and derives goodput and byte loss"
    assert (scrape["down_mbps"], scrape["up_mbps"], scrape["byte_loss_pct"], scrape["srtt_ms"]) == (
        12, 4, 2, 250)


def test_flow_records_are_requests(tmp_path):
    db = str(tmp_path / "x.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(DATA / "flows.log"), "--db", db]).exit_code == 0
    assert CliRunner().invoke(main, ["analyze", "--db", db]).exit_code == 0
    con = duckdb.connect(db)
    assert con.execute("SELECT request, start_ns, end_ns, bytes_up, bytes_down FROM requests "
                       "ORDER BY request").fetchall() == [
        ("abcd/42", T0 - 1_000_000_000, T0, 10, 1000),
        ("line 1", T0 - 2_000_000_000, T0, 1000, 999_000)]


def test_format_named_again_replaces_the_other_reading(tmp_path):
    """A file stored as one format and ingested again as another (--format)
    replaces the first reading instead of being refused as a duplicate."""
    db = str(tmp_path / "x.duckdb")
    p = tmp_path / "a.log"  # tracekit's own schema, but it names queqiaod: detected as Queqiao
    p.write_text(json.dumps({"time": "2026-08-18T10:00:00Z", "kind": "request_start",
                             "request": "r1", "service": "queqiaod"}) + "\n")
    r = CliRunner().invoke(main, ["ingest", str(p), "--db", db])
    assert "ingested as event log 1 (queqiao)" in r.output
    r = CliRunner().invoke(main, ["ingest", str(p), "--db", db, "--format", "queqiao"])
    assert "already in the store as event log 1" in r.output
    r = CliRunner().invoke(main, ["ingest", str(p), "--db", db, "--format", "jsonl"])
    assert r.exit_code == 0 and "ingested as event log 1 (jsonl), replacing event log 1" in r.output
    con = duckdb.connect(db)
    assert con.execute("SELECT log_id, format FROM event_logs").fetchall() == [(1, "jsonl")]
    assert con.execute("SELECT kind FROM events").fetchall() == [("request_start",)]


def test_prometheus_without_timestamps(tmp_path):
    one = tmp_path / "one.prom"
    one.write_text("# TYPE queqiao_active_flows gauge\nqueqiao_active_flows 3\n"
                   "queqiao_class_transitions_total{class=\"1\"} 4\n")
    two = tmp_path / "two.prom"
    two.write_text("queqiao_active_flows 3\nqueqiao_active_flows 4\n")
    parsed, got = rows(one)  # no time: kept at 0 on the file's own clock
    assert (parsed.trace_clock_events, got[0]["ts_ns"], parsed.time_stated) == (1, 0, False)
    parsed, got = rows(one, time_ns=T0)
    assert parsed.format == "prometheus" and parsed.time_stated and got[0]["ts_ns"] == T0
    assert got[0]["fields"]['queqiao_class_transitions_total{class="1"}'] == 4
    with pytest.raises(Exception, match="2 scrapes without a time"):
        read_log(str(two), time_ns=T0)


def test_a_harness_tsv_with_a_time_column_needs_no_stated_time(tmp_path):
    p = tmp_path / "live.tsv"
    p.write_text("round\tlabel\ttime\tmbits_per_sec\tcomplete\n"
                 "1\tqueqiao\t2026-08-18T10:00:00Z\t33.2\t1\n"
                 "2\tdirect\t2026-08-18T10:00:05Z\t20.1\t0\n")
    parsed, got = rows(p)
    assert parsed.format == "queqiao-tsv" and not parsed.time_stated
    assert [(r["ts_ns"], r["run"], r["fields"]["complete"]) for r in got] == [
        (T0, "queqiao/1", True), (T0 + 5_000_000_000, "direct/2", False)]


def _cell(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def test_queqiaos_live_harness_output_read_whole():
    """live-matched.tsv: what Queqiao's scripts/bench_live_matched.sh wrote (3
    rounds through two SOCKS5 proxies to a 1 MiB object we served). No time
    column: kept on its own clock; every cell as the text says; the script's
    mbits_per_sec is bytes * 8 / seconds / 1e6 rounded to 3 decimals."""
    lines = (DATA / "live-matched.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    want = [dict(zip(header, (_cell(c) for c in ln.split("\t")))) for ln in lines[1:]]
    parsed, got = rows("live-matched.tsv")
    assert parsed.format == "queqiao-tsv" and parsed.malformed == [] and len(got) == 6
    assert parsed.trace_clock_events == 6 and {r["ts_ns"] for r in got} == {0}
    for r, w in zip(got, want):
        assert {k: r["fields"][k] for k in w if k != "complete"} == {
            k: v for k, v in w.items() if k != "complete"}
        assert r["fields"]["complete"] is (w["complete"] == 1) is True
        assert r["run"] == f"{w['label']}/{w['round']}" and r["fields"]["bytes"] == 1 << 20
        assert abs(r["fields"]["bytes"] * 8 / r["fields"]["seconds"] / 1e6
                   - r["fields"]["mbits_per_sec"]) <= 0.0005
    parsed, got = rows("live-matched.tsv", time_ns=T0)
    assert parsed.time_stated and parsed.trace_clock_events == 0 and {r["ts_ns"] for r in got} == {T0}


@pytest.mark.parametrize("name, samples", [("measurements-20260810-dns.prom", 7),
                                           ("measurements-20260810-rescue.prom", 5)])
def test_a_measurement_days_metrics_scrapes(name, samples):
    """/metrics text as Queqiao's measurement notes of 2026-08-10 print it: bare
    samples, no HELP, TYPE or time. One scrape, every sample as written."""
    want = {n: int(v) for n, v in (ln.split() for ln in (DATA / name).read_text().splitlines())}
    parsed, got = rows(name)
    assert parsed.format == "prometheus" and parsed.malformed == [] and len(want) == samples
    assert [(r["kind"], r["ts_ns"]) for r in got] == [("queqiao_metrics", 0)]
    assert {k: got[0]["fields"][k] for k in want} == want and parsed.trace_clock_events == 1


def test_both_scrapes_of_the_day_in_one_file_are_refused_in_one_line(tmp_path):
    """Two scrapes with no time between them: no interval can be known."""
    both = tmp_path / "day.prom"
    both.write_text("".join((DATA / f"measurements-20260810-{n}.prom").read_text()
                            for n in ("dns", "rescue")))
    r = CliRunner().invoke(main, ["ingest", str(both), "--db", str(tmp_path / "x.duckdb")])
    assert r.exit_code == 2
    (line,) = r.output.splitlines()
    assert line.startswith(f"tracekit: error: {both}: 2 scrapes without a time"), line


def test_the_source_trees_bench_report():
    """report-roundtrip.json: the report cmd/queqiaobench's own test writes
    (TestReportRoundTripsAsJSON, encoding/json's MarshalIndent): every section
    row an event with its fields as written, the path conditions in each."""
    doc = json.loads((DATA / "report-roundtrip.json").read_text())
    parsed, got = rows("report-roundtrip.json")
    assert parsed.malformed == [] and parsed.trace_clock_events == 4
    assert [r["kind"] for r in got] == ["queqiaobench_config", "queqiaobench_trial",
                                        "queqiaobench_latency", "queqiaobench_summary"]
    config, trial, latency, summary = (r["fields"] for r in got)
    assert config["arguments"] == ["--rtt", "200", "--seed", "7"] and config["source"] == doc["source"]
    for fields, section in ((trial, "trials"), (latency, "latency"), (summary, "summary")):
        assert {k: fields[k] for k in doc[section][0]} == doc[section][0]
        assert fields["path"] == doc["path"]
    assert (latency["cold_ms"], latency["warm_ms"], got[2]["run"]) == (210, 201, "queqiao/1")
