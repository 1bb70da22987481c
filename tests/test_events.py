"""Event logs in: tracekit JSON Lines, CSV, qlog, Queqiao; malformed records
counted by line; timestamps exact to the nanosecond; clocks."""

import json
from pathlib import Path

import duckdb
from click.testing import CliRunner

from tracekit.cli import main
from tracekit.readers.events import read_log

SAMPLES = Path(__file__).resolve().parents[1] / "captures"
NS = 1_785_578_400_000_000_000  # 2026-08-01T10:00:00Z


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def table(parsed):
    return parsed.table.to_pylist()


def test_timestamps_in_ns_and_rfc3339_agree_to_the_nanosecond(tmp_path):
    p = write(tmp_path / "a.jsonl", [
        json.dumps({"ts": NS + 123456789, "kind": "a"}),
        json.dumps({"ts": "2026-08-01T10:00:00.123456789Z", "kind": "b"}),
        json.dumps({"time": "2026-08-01T18:00:00.123456789+08:00", "kind": "c"}),
        json.dumps({"ts": "2026-08-01T04:30:00.1234567891-05:30", "kind": "d"}),  # 10 digits: bad
        json.dumps({"ts": "2026-08-01t09:59:59.5-00:00", "kind": "e"}),
        json.dumps({"ts_ns": NS, "kind": "f"}),
    ])
    parsed = read_log(p)
    got = {r["kind"]: r["ts_ns"] for r in table(parsed)}
    assert got == {"a": NS + 123456789, "b": NS + 123456789, "c": NS + 123456789,
                   "e": NS - 500_000_000, "f": NS}
    assert parsed.malformed == [(4, "timestamp is neither ns since the epoch nor RFC 3339: "
                                    "2026-08-01T04:30:00.1234567891-05:30")]


def test_malformed_lines_are_counted_with_their_numbers_and_the_rest_kept(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"\r\n".join([
        json.dumps({"ts": NS, "kind": "ok", "request": 7, "flow": 40000}).encode(),
        b"{not json",
        b"",
        b"[1, 2]",
        json.dumps({"kind": "no time"}).encode(),
        json.dumps({"ts": 1785578400, "kind": "seconds"}).encode(),
        b'{"ts": 1, "kind": "\xff"}',
        json.dumps({"ts": NS, "kind": "last", "flow": {"local_port": 5, "remote_addr": "198.19.0.1",
                                                        "remote_port": 80}}).encode(),
    ]) + b"\r\n")
    parsed = read_log(str(path))
    assert parsed.records == 7  # the blank line is not a record
    assert [n for n, _ in parsed.malformed] == [2, 4, 5, 6, 7]
    reasons = dict(parsed.malformed)
    assert reasons[2] == "not JSON" and reasons[4] == "not a JSON object"
    assert reasons[5] == "no timestamp (ts_ns, ts or time)"
    assert reasons[6] == "numeric timestamp must be ns since the epoch, got 1785578400"
    assert reasons[7].startswith("not UTF-8")
    first, last = table(parsed)
    assert (first["line"], first["request"], first["local_port"]) == (1, "7", 40000)
    assert (last["line"], last["local_port"], last["remote_addr"], last["remote_port"]) == (
        8, 5, "198.19.0.1", 80)
    assert json.loads(last["fields"])["flow"]["remote_port"] == 80  # the record is kept whole


def test_csv_maps_to_the_same_schema(tmp_path):
    p = write(tmp_path / "e.csv", [
        "ts_ns,kind,request,requested_frames,delivered_frames,note",
        f"{NS},playback_callback,r1,480,240,",
        f"{NS + 20_000_000},playback_callback,r1,480,480,fine",
        f"{NS},playback_callback,r1",
        "",
    ])
    parsed = read_log(p)
    assert parsed.format == "csv"
    assert parsed.malformed == [(4, "3 fields, the header has 6")]
    rows = table(parsed)
    assert [r["ts_ns"] for r in rows] == [NS, NS + 20_000_000]
    assert json.loads(rows[0]["fields"]) == {"ts_ns": NS, "kind": "playback_callback",
                                             "request": "r1", "requested_frames": 480,
                                             "delivered_frames": 240}
    assert json.loads(rows[1]["fields"])["note"] == "fine"


def test_qlog_json_as_aioquic_writes_it(tmp_path):
    ms = NS / 1e6
    doc = {"qlog_format": "JSON", "qlog_version": "0.3", "traces": [{
        "common_fields": {"ODCID": "abcd"}, "vantage_point": {"type": "client"},
        "events": [
            {"time": ms + 0.5, "name": "transport:packet_sent",
             "data": {"header": {"packet_type": "initial", "packet_number": 0}, "raw": {"length": 1252}}},
            {"time": ms + 21.25, "name": "recovery:metrics_updated",
             "data": {"cwnd": 14720, "bytes_in_flight": 1252, "smoothed_rtt": 20.5, "min_rtt": 20.5}},
            {"time": "soon", "name": "transport:packet_received", "data": {}},
        ]}]}
    p = tmp_path / "c.qlog"
    p.write_text(json.dumps(doc))
    parsed = read_log(str(p))
    assert parsed.format == "qlog"
    rows = table(parsed)
    assert [(r["kind"], r["ts_ns"]) for r in rows] == [
        ("quic_packet_sent", NS + 500_000), ("quic_metrics_updated", NS + 21_250_000)]
    fields = json.loads(rows[1]["fields"])
    assert fields["data"]["cwnd"] == 14720 and fields["vantage_point"] == {"type": "client"}
    assert parsed.malformed == [(3, "qlog event without a finite numeric time and a name")]


def test_qlog_json_seq_with_a_reference_time(tmp_path):
    ref_ms = NS // 1_000_000
    records = [
        {"qlog_version": "0.4", "qlog_format": "JSON-SEQ",
         "trace": {"common_fields": {"reference_time": ref_ms, "time_format": "relative"},
                   "vantage_point": {"type": "server"}}},
        {"time": 1.5, "name": "quic:packet_received", "data": {"raw": {"length": 1200}}},
        {"time": 2.0, "name": "quic:packets_acked", "data": {"packet_numbers": [0, 1]}},
    ]
    p = tmp_path / "s.sqlog"
    p.write_text("".join("\x1e" + json.dumps(r) + "\n" for r in records))
    rows = table(read_log(str(p)))
    assert [(r["kind"], r["ts_ns"]) for r in rows] == [
        ("quic_packet_received", NS + 1_500_000), ("quic_packets_acked", NS + 2_000_000)]


def test_qlog_without_a_clock_is_kept_on_its_trace_clock(tmp_path):
    """Relative times and no reference: kept (1 ms after the trace began), marked,
    with a warning that says how to place the log; --clock-offset places it."""
    p = tmp_path / "r.qlog"
    p.write_text(json.dumps({"qlog_version": "0.3", "traces": [
        {"common_fields": {}, "events": [{"time": 1.0, "name": "transport:packet_sent"}]}]}))
    db = str(tmp_path / "x.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(p), "--db", db])
    assert r.exit_code == 0
    assert "1 event count from the start of their trace" in r.output
    con = duckdb.connect(db)
    assert con.execute("SELECT ts_ns FROM events").fetchall() == [(1_000_000,)]
    assert con.execute("SELECT clock_source FROM event_logs").fetchall() == [("trace_start",)]
    con.close()
    r = CliRunner().invoke(main, ["ingest", str(p), "--db", db, "--replace",
                                  "--clock-offset", "1700000000s"])
    assert r.exit_code == 0 and "count from the start" not in r.output
    con = duckdb.connect(db)
    assert con.execute("SELECT ts_ns FROM events").fetchall() == [(1_700_000_000_001_000_000,)]


def queqiao_lines():
    t = "2026-08-01T18:00:0{}.000000001+08:00"
    base = {"level": "INFO", "service": "queqiaod", "role": "client", "pid": 4242}
    return [
        json.dumps({**base, "time": t.format(0), "msg": "runtime configuration", "config_schema": 1,
                    "transport": "quic", "chunk_size_bytes": 65536}),
        json.dumps({**base, "time": t.format(1), "msg": "performance snapshot", "type": "metrics",
                    "queqiao_quic_packets_lost": 10, "queqiao_bytes_up_total": 1000,
                    "queqiao_quic_smoothed_rtt_seconds": 0.182}),
        '{"time": "2026-08-01T18:00:02+08:00", "msg": "performance snap',  # cut short
        json.dumps({**base, "time": t.format(3), "msg": "performance snapshot", "type": "metrics",
                    "queqiao_quic_packets_lost": 7, "queqiao_bytes_up_total": 5000}),
        json.dumps({**base, "time": t.format(4), "msg": "local flow complete", "session_id": "s1",
                    "flow_id": 3, "transport": "quic", "bytes_up": 355000, "bytes_down": 120,
                    "duration": 2_500_000_000, "class": 1, "fec_available": True,
                    "fec_recovered_total": 4}),
        json.dumps({**base, "role": "server", "level": "DEBUG", "time": t.format(5),
                    "msg": "remote flow opened", "open_duration": 1_000_000, "account_id": "acct-9",
                    "device": {"device_id": "dev-1", "model": "x"}, "user_email": "a@b"}),
        json.dumps({**base, "time": t.format(6), "msg": "lane performance snapshot",
                    "type": "lane_metrics", "t": 6.0, "lane": 0, "cwnd": 120000, "inflight": 64000,
                    "srtt": 181.0, "lost": 2}),
    ]


def test_queqiao_runtime_log(tmp_path):
    p = write(tmp_path / "client.log", queqiao_lines())
    parsed = read_log(p)
    assert parsed.format == "queqiao"
    assert parsed.malformed[0][0] == 3 and parsed.malformed[0][1].startswith("not JSON")
    rows = table(parsed)
    kinds = [r["kind"] for r in rows]
    assert kinds == ["queqiao_config", "queqiao_metrics", "queqiao_metrics",
                     "queqiao_flow_complete", "queqiao_flow_opened", "queqiao_lane"]
    second = json.loads(rows[2]["fields"])
    # the loss sum fell from 10 to 7 (a loss found spurious, or a connection ended):
    # that interval's change is unknown, not negative and not 0
    assert second["deltas"] == {"queqiao_quic_packets_lost": None, "queqiao_bytes_up_total": 4000}
    assert parsed.negative_deltas == 1
    flow = rows[3]
    assert flow["request"] == "s1/3"
    assert flow["ts_ns"] == NS + 4_000_000_001
    assert json.loads(flow["fields"])["duration_ns"] == 2_500_000_000  # start = ts - duration
    opened = json.loads(rows[4]["fields"])
    assert "account_id" not in opened and "user_email" not in opened and "device" not in opened
    assert parsed.private_dropped == 3
    assert not any(s in r["fields"] for r in rows for s in ("acct-9", "dev-1", "a@b"))


def test_queqiao_bench_report(tmp_path):
    doc = {"schema_version": 1, "source": {"time": "2026-08-01T10:00:00Z"},
           "path": {"rtt_ms": 180, "loss_percent": 1.0},
           "trials": [{"stack": "queqiao", "trial": 0, "seconds": 2.1, "complete": True},
                      {"stack": "tcp", "trial": 0, "seconds": 7.9, "complete": False}],
           "summary": [{"stack": "queqiao", "trials": 1, "completion_rate": 1.0}],
           "latency": [{"stack": "queqiao", "trial": 0, "cold_ms": 420, "warm_ms": 190}]}
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(doc, indent=2))
    parsed = read_log(str(p))
    assert parsed.format == "queqiaobench" and not parsed.malformed
    rows = table(parsed)
    assert [r["kind"] for r in rows] == ["queqiaobench_config", "queqiaobench_trial",
                                         "queqiaobench_trial", "queqiaobench_latency",
                                         "queqiaobench_summary"]
    assert {r["ts_ns"] for r in rows} == {NS}
    assert rows[2]["run"] == "tcp/0" and json.loads(rows[2]["fields"])["complete"] is False


def test_cli_ingest_reports_malformed_lines_and_refuses_duplicates(tmp_path):
    p = write(tmp_path / "e.jsonl", [json.dumps({"ts": NS, "kind": "a"}), "oops",
                                     json.dumps({"ts": NS + 1, "kind": "b"})])
    db = str(tmp_path / "x.duckdb")
    r = CliRunner().invoke(main, ["ingest", p, "--db", db, "--label", "run=1",
                                  "--clock-offset", "-1.5ms"])
    assert r.exit_code == 0, r.output
    assert "e.jsonl: ingested as event log 1 (jsonl): 2 events of 3 records" in r.output
    assert f"{p}: 1 malformed record skipped: line 2: not JSON; the rest of the file was kept" in r.output
    r = CliRunner().invoke(main, ["sql", "SELECT ts_ns - log_ts_ns, count(*) FROM events GROUP BY 1",
                                  "--db", db, "--format", "csv"])
    assert r.output.splitlines()[1] == "-1500000,2"
    r = CliRunner().invoke(main, ["sql", "SELECT malformed_lines, clock_source, labels['run'] "
                                  "FROM event_logs", "--db", db, "--format", "json"])
    assert json.loads(r.output) == [{"malformed_lines": [2], "clock_source": "given",
                                     "labels['run']": "1"}]
    r = CliRunner().invoke(main, ["ingest", p, "--db", db])
    assert "already in the store as event log 1" in r.output


def test_cli_format_option_and_bad_offset(tmp_path):
    p = write(tmp_path / "weird.txt", [json.dumps({"ts": NS, "kind": "a"})])
    db = str(tmp_path / "x.duckdb")
    assert CliRunner().invoke(main, ["ingest", p, "--db", db, "--format", "jsonl"]).exit_code == 0
    r = CliRunner().invoke(main, ["ingest", p, "--db", db, "--clock-offset", "soon"])
    assert r.exit_code == 2 and "--clock-offset 'soon' is not a duration" in r.output


def test_clock_offset_is_recovered_from_connections(tmp_path):
    """The streaming sample's client log shares the capture's clock; shifted by
    a known offset, the estimate must find it again, inside its interval."""
    src = SAMPLES / "streaming-stalls-client-events.jsonl"
    shift = 2_500_000_123
    shifted = tmp_path / "shifted.jsonl"
    with open(src) as f, open(shifted, "w") as out:
        for line in f:
            rec = json.loads(line)
            rec["ts"] -= shift
            out.write(json.dumps(rec) + "\n")
    db = str(tmp_path / "x.duckdb")
    runner = CliRunner()
    r = runner.invoke(main, ["ingest", str(SAMPLES / "streaming-stalls-client.pcap"), str(src),
                             str(shifted), "--db", db])
    assert r.exit_code == 0, r.output
    from tracekit.presentation.clock import estimate_offset
    from tracekit.store.db import connect
    con = connect(db)
    same = estimate_offset(con, 1, 1)
    assert same.consistent and same.lower_ns <= 0 <= same.upper_ns
    assert same.uncertainty_ns < 5_000_000  # bounded by the connect() call's few ms
    moved = estimate_offset(con, 2, 1)
    assert moved.lower_ns <= shift <= moved.upper_ns
    assert moved.upper_ns - moved.lower_ns == same.upper_ns - same.lower_ns
    con.close()
    r = runner.invoke(main, ["clock", "2", "--capture", "1", "--apply", "--db", db])
    assert r.exit_code == 0, r.output
    con = connect(db)
    (source, offset), = con.execute(
        "SELECT clock_source, clock_offset_ns FROM event_logs WHERE log_id = 2").fetchall()
    assert source == "estimated" and offset == moved.offset_ns
    # the two logs now agree within the uncertainty
    diff = con.execute("""
        SELECT max(abs(a.ts_ns - b.ts_ns)) FROM events a JOIN events b USING (line)
        WHERE a.log_id = 1 AND b.log_id = 2""").fetchall()[0][0]
    assert diff <= moved.uncertainty_ns
    con.close()
