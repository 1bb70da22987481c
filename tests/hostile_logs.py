"""Malformed event logs, one small file each, for the hostile-input tests.

`cases()` yields (name, bytes): every class the hostile-input issue lists
(times outside 1677-2262, deep nesting, huge fields and integers, wrong JSON
types in qlog, Queqiao records of the wrong shape, encodings, CSV quoting)
in each format tracekit reads, each beside good records so that the test can
tell a counted bad record from a rejected file.
"""

import json

GOOD_NS = 1_700_000_000_000_000_000


def _jl(*records):
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records).encode()


def _good(i=0):
    return {"ts_ns": GOOD_NS + i, "kind": "request_start", "run": "r", "request": f"q{i}"}


def _deep(depth):
    return "[" * depth + "]" * depth


def jsonl_cases():
    bad_values = {
        "year_0001": '"0001-01-01T00:00:00Z"',
        "year_9999": '"9999-12-31T23:59:59Z"',
        "year_1600": '"1600-06-01T00:00:00.5Z"',
        "year_2300": '"2300-01-01T00:00:00+01:00"',
        "year_1969": '"1969-07-20T20:17:40Z"',
        "year_1972": '"1972-01-01T00:00:00Z"',
        "month_13": '"2024-13-01T00:00:00Z"',
        "day_32": '"2024-01-32T00:00:00Z"',
        "hour_25": '"2024-01-01T25:00:00Z"',
        "offset_99": '"2024-01-01T00:00:00+99:00"',
        "int_5000_digits": "9" * 5000,
        "neg_5000_digits": "-" + "9" * 5000,
        "float_huge": "1e400",
        "float_nan": "NaN",
        "infinity": "Infinity",
        "neg_ns": "-5",
        "int64_max": str((1 << 63) - 1),
        "int64_min": str(-(1 << 63)),
        "uint64_max": str((1 << 64) - 1),
        "ts_list": "[1,2]",
        "ts_object": '{"a":1}',
        "ts_bool": "true",
        "ts_null": "null",
        "ts_empty": '""',
    }
    for name, value in bad_values.items():
        bad = '{"ts": %s, "kind": "request_end", "run": "r", "request": "q9"}' % value
        yield f"jsonl_{name}.jsonl", _jl(_good(0), bad, _good(1))
    yield "jsonl_deep_nesting.jsonl", _jl(_good(0), '{"ts_ns": %d, "kind": "x", "f": %s}'
                                          % (GOOD_NS, _deep(100_000)), _good(1))
    yield "jsonl_kind_5000_digits.jsonl", _jl(_good(0), '{"ts_ns": %d, "kind": %s}'
                                              % (GOOD_NS, "7" * 5000), _good(1))
    yield "jsonl_field_1mb.jsonl", _jl(_good(0), {**_good(2), "blob": "x" * (1 << 20)}, _good(1))
    yield "jsonl_not_object.jsonl", _jl(_good(0), "[1, 2, 3]", "42", '"s"', _good(1))
    yield "jsonl_truncated_line.jsonl", _jl(_good(0), '{"ts_ns": 1, "kind": "x"', _good(1))
    yield "jsonl_nul_bytes.jsonl", _jl(_good(0)) + b'{"ts_ns": 1\x00\x00}\n' + _jl(_good(1))
    yield "jsonl_bad_utf8.jsonl", _jl(_good(0)) + b'{"kind": "\xff\xfe"}\n' + _jl(_good(1))
    yield "jsonl_lone_surrogate.jsonl", _jl(_good(0), '{"ts_ns": %d, "kind": "\\ud800"}'
                                            % GOOD_NS, _good(1))
    yield "jsonl_duplicate_keys.jsonl", _jl(_good(0), '{"ts_ns": 1, "ts_ns": %d, "kind": "x"}'
                                            % GOOD_NS, _good(1))
    yield "jsonl_port_out_of_range.jsonl", _jl(_good(0), {**_good(3), "local_port": 70000},
                                               {**_good(4), "local_port": -1},
                                               {**_good(5), "local_port": "80"}, _good(1))
    yield "jsonl_crlf.jsonl", _jl(_good(0), _good(1)).replace(b"\n", b"\r\n")
    yield "jsonl_only_bad.jsonl", _jl('{"ts": "yesterday", "kind": "x"}', "{}")
    yield "jsonl_empty_lines.jsonl", b"\n\n\n"
    text = _jl(_good(0), _good(1)).decode()
    yield "jsonl_bom_utf8.jsonl", b"\xef\xbb\xbf" + text.encode()
    yield "jsonl_utf16le.jsonl", b"\xff\xfe" + text.encode("utf-16-le")
    yield "jsonl_utf16be.jsonl", b"\xfe\xff" + text.encode("utf-16-be")
    yield "jsonl_utf32le.jsonl", b"\xff\xfe\x00\x00" + text.encode("utf-32-le")
    yield "jsonl_utf16_no_bom_bad.jsonl", text.encode("utf-16-le")


def csv_cases():
    head = "ts_ns,kind,run,request\n"
    good = f"{GOOD_NS},request_start,r,q0\n{GOOD_NS + 1},request_end,r,q0\n"
    yield "csv_unterminated_quote.csv", (head + f'{GOOD_NS},"request_start,r,q1\n' + good).encode()
    yield "csv_field_200k.csv", (head + f"{GOOD_NS},{'x' * 200_000},r,q1\n" + good).encode()
    yield "csv_quoted_field_200k.csv", (head + f'{GOOD_NS},"{"y" * 200_000}",r,q1\n' + good).encode()
    yield "csv_int_5000_digits.csv", (head + f"{'9' * 5000},request_start,r,q1\n" + good).encode()
    yield "csv_year_9999.csv", (head + "9999-01-01T00:00:00Z,request_start,r,q1\n" + good).encode()
    yield "csv_wrong_field_count.csv", (head + f"{GOOD_NS},request_start\n" + good).encode()
    yield "csv_nul.csv", (head + f"{GOOD_NS},req\x00uest,r,q1\n" + good).encode()
    yield "csv_bom.csv", b"\xef\xbb\xbf" + (head + good).encode()
    yield "csv_utf16.csv", b"\xff\xfe" + (head + good).encode("utf-16-le")
    yield "csv_only_header.csv", head.encode()
    yield "csv_stray_quote_in_field.csv", (head + f'{GOOD_NS},requ"est,r,q1\n' + good).encode()
    yield "csv_bad_utf8.csv", head.encode() + b"1,\xff,r,q\n" + good.encode()


def _qlog(trace, version="0.3"):
    return json.dumps({"qlog_version": version, "traces": [trace]}).encode()


def _ev(t=1.5, name="transport:packet_sent"):
    return {"time": t, "name": name, "data": {"packet_type": "1RTT"}}


def qlog_cases():
    ref = {"reference_time": 1_700_000_000_000.0}
    yield "qlog_events_int.qlog", _qlog({"common_fields": ref, "events": 5})
    yield "qlog_events_string.qlog", _qlog({"common_fields": ref, "events": "abc"})
    yield "qlog_config_list.qlog", _qlog({"common_fields": ref, "configuration": [1, 2],
                                          "events": [_ev()]})
    yield "qlog_common_list.qlog", _qlog({"common_fields": [1, 2], "events": [_ev()]})
    yield "qlog_common_string.qlog", _qlog({"common_fields": "x", "events": [_ev()]})
    yield "qlog_time_offset_string.qlog", _qlog({"common_fields": ref, "events": [_ev()],
                                                 "configuration": {"time_offset": "abc"}})
    yield "qlog_time_offset_list.qlog", _qlog({"common_fields": ref, "events": [_ev()],
                                               "configuration": {"time_offset": [1]}})
    yield "qlog_reference_huge.qlog", _qlog({"common_fields": {"reference_time": 1e300},
                                             "events": [_ev(), _ev(2)]})
    yield "qlog_reference_list.qlog", _qlog({"common_fields": {"reference_time": [1]},
                                             "events": [_ev()]})
    for name, t in (("nan", "NaN"), ("inf", "Infinity"), ("neg_inf", "-Infinity"),
                    ("huge", "1e308"), ("digits", "9" * 5000)):
        text = ('{"qlog_version": "0.3", "traces": [{"common_fields": '
                '{"reference_time": 1700000000000}, "events": ['
                '{"time": %s, "name": "transport:packet_sent"}, '
                '{"time": 2.0, "name": "transport:packet_sent"}]}]}' % t)
        yield f"qlog_time_{name}.qlog", text.encode()
    yield "qlog_event_fields_bad.qlog", _qlog({"common_fields": ref, "event_fields": 7,
                                               "events": [[1, "x"], _ev()]})
    yield "qlog_name_int.qlog", _qlog({"common_fields": ref, "events": [_ev(name=5), _ev()]})
    yield "qlog_data_list.qlog", _qlog({"common_fields": ref,
                                        "events": [{"time": 1, "name": "a:b", "data": [1]}, _ev()]})
    yield "qlog_traces_not_list.qlog", json.dumps({"qlog_version": "0.3", "traces": {}}).encode()
    yield "qlog_deep.qlog", ('{"qlog_version": "0.3", "traces": [' + _deep(100_000) + "]}").encode()
    yield "qlog_truncated.qlog", _qlog({"common_fields": ref, "events": [_ev()]})[:-10]
    seq = "\x1e" + json.dumps({"qlog_version": "0.4", "trace": {"common_fields": ref}}) + "\n"
    yield "qlog_seq_bad_records.sqlog", (seq + "\x1e[1]\n\x1e{\n\x1e" + json.dumps(_ev()) + "\n"
                                         + "\x1e" + json.dumps({"time": "x", "name": "a"}) + "\n"
                                         ).encode()
    yield "qlog_seq_deep.sqlog", (seq + "\x1e" + _deep(100_000) + "\n\x1e"
                                  + json.dumps(_ev()) + "\n").encode()
    yield "qlog_seq_trace_list.sqlog", ("\x1e" + json.dumps({"qlog_version": "0.4", "trace": [1]})
                                        + "\n\x1e" + json.dumps(_ev()) + "\n").encode()


def queqiao_cases():
    def rec(**kw):
        base = {"time": "2026-05-01T10:00:00.123456789Z", "level": "INFO", "msg": "x",
                "service": "queqiaod"}
        return json.dumps({**base, **kw})
    yield "queqiao_msg_list.log", _jl(rec(), rec(msg=["local flow complete"]), rec())
    yield "queqiao_msg_object.log", _jl(rec(), rec(msg={"a": 1}), rec())
    yield "queqiao_duration_string.log", _jl(rec(), rec(msg="local flow complete",
                                                        duration="2s", flow_id=1), rec())
    yield "queqiao_duration_huge.log", _jl(rec(), '{"time": "2026-05-01T10:00:00Z", "level": '
                                           '"INFO", "msg": "local flow complete", "duration": %s}'
                                           % ("9" * 5000), rec())
    yield "queqiao_time_year_0.log", _jl(rec(), rec(time="0000-01-01T00:00:00Z"), rec())
    yield "queqiao_time_int.log", _jl(rec(), rec(time=5), rec())
    yield "queqiao_deep.log", _jl(rec(), '{"time": "2026-05-01T10:00:00Z", "level": "INFO", '
                                  '"msg": "x", "f": %s}' % _deep(100_000), rec())
    yield "queqiao_counter_strings.log", _jl(
        rec(msg="performance snapshot", role="client", pid=1, queqiao_x_total=5),
        rec(msg="performance snapshot", role="client", pid=1, queqiao_x_total="6"),
        rec(msg="performance snapshot", role=[1], pid={"a": 1}, queqiao_x_total=1e308),
        rec(msg="performance snapshot", role="client", pid=1, queqiao_x_total=float("inf")))
    yield "queqiao_not_object.log", _jl(rec(), "[1]", "3", rec())
    yield "queqiaobench_trials_not_list.json", json.dumps(
        {"schema_version": 1, "trials": 5, "source": {"time": "2026-05-01T10:00:00Z"}}).encode()
    yield "queqiaobench_source_list.json", json.dumps(
        {"schema_version": 1, "trials": [{"trial": 1, "stack": "a"}], "source": [1]}).encode()
    yield "queqiaobench_trial_list_key.json", json.dumps(
        {"schema_version": 1, "trials": [{"trial": [1], "stack": {"a": 1}}],
         "source": {"time": "2026-05-01T10:00:00Z"}}).encode()
    yield "queqiaobench_deep.json", ('{"schema_version": 1, "trials": ' + _deep(100_000)
                                     + "}").encode()


def text_cases():
    """Queqiao's text forms, Prometheus scrapes and harness TSV gone wrong."""
    t = "time=2026-05-01T10:00:00Z level=INFO"
    yield "slog_text_unclosed_quote.log", (f'{t} msg="performance snapshot queqiao_x_total=5\n'
                                           f'{t} msg=x\nrandom words here\n').encode()
    yield "slog_text_duration_garbage.log", (f'{t} msg="local flow complete" duration=2parsecs\n'
                                             f'{t} msg="local flow complete" duration=99999999999h\n'
                                             ).encode()
    yield "lane_text_no_t.log", b"lane t= flow=1 lane=2\nlane t=abc flow=1\nlane t=1.5 sent=9\n"
    yield "prom_nan_values.prom", (b"# timestamp: 2026-05-01T10:00:00Z\nqueqiao_a_total NaN\n"
                                   b"queqiao_b +Inf\nqueqiao_c 1e999999\nqueqiao_d 12 abc\n")
    yield "prom_time_garbage.prom", b"# timestamp: yesterday\nqueqiao_a 1\n"
    yield "harness_ragged.tsv", b"trial\tlabel\tcomplete\n1\tq\t1\n2\tq\n3\tq\t1\textra\n"


def har_cases():
    def har(*entries):
        return json.dumps({"log": {"version": "1.2", "entries": list(entries)}}).encode()
    ok = {"startedDateTime": "2026-05-01T10:00:00.000Z", "time": 5, "request": {"url": "https://a/"},
          "response": {"status": 200}, "timings": {"send": 1, "wait": 3, "receive": 1}}
    yield "har_entries_not_list.har", json.dumps({"log": {"entries": 5}}).encode()
    yield "har_bad_entries.har", har(ok, 3, {**ok, "startedDateTime": "yesterday"},
                                     {**ok, "time": "slow"}, {**ok, "time": -1},
                                     {**ok, "request": [1], "timings": "x"}, ok)
    yield "har_deep.har", ('{"log": {"entries": [' + _deep(100_000) + "]}}").encode()
    yield "har_url_garbage.har", har({**ok, "request": {"url": "http://[::1:80/"},
                                      "serverIPAddress": 7})


def cases():
    yield from text_cases()
    yield from har_cases()
    yield from jsonl_cases()
    yield from csv_cases()
    yield from qlog_cases()
    yield from queqiao_cases()
