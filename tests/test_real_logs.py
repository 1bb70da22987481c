"""qlog files written by other QUIC stacks (../shared/logs, provenance in its
README): every event read, its time exact to the nanosecond from the file's text."""

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import SHARED, needs_shared

from tracekit.readers.events import read_log

LOGS = SHARED.parent / "logs"


def _rows(name):
    parsed = read_log(str(LOGS / name))
    t = parsed.table
    return parsed, list(zip(t.column("ts_ns").to_pylist(), t.column("kind").to_pylist()))


@needs_shared
@pytest.mark.parametrize("name, events, first, kinds, trace_clock", [
    # draft-02, string times, reference_time "1592171671.6648324" in seconds as a string
    ("pcap2qlog-draft02-ngtcp2-29-dsb.qlog", 25, (1_592_171_671_664_832_400, "quic_connection_started"),
     {"quic_packet_received": 12, "quic_packet_sent": 7}, 0),
    # draft-00 event arrays, time_units us, a reference "11001" that is no wall clock
    ("picoquic-qlog_trace_ref.qlog", 104, (0, "quic_datagrams_received"),
     {"quic_metrics_updated": 24, "quic_packet_sent": 20}, 104),
    # quic-go NDJSON: a header line, then an event a line; reference 1725288150744.6677 ms
    ("qperf-go-README-ecf6a13.qlog", 16, (1_725_288_150_746_030_358, "quic_connection_started"),
     {"qperf_report": 9, "qperf_handshake_completed": 1}, 0),
    # quiche JSON-SEQ without a reference time
    ("quiche-e53b495c-streamer-test0.sqlog", 4, (0, "quic_packet_sent"), {"quic_packet_sent": 4}, 4),
])
def test_real_qlog(name, events, first, kinds, trace_clock):
    parsed, rows = _rows(name)
    assert parsed.malformed == [] and len(rows) == events == parsed.records
    assert min(rows) == first
    for kind, n in kinds.items():
        assert sum(1 for _, k in rows if k == kind) == n
    assert parsed.trace_clock_events == trace_clock


@needs_shared
def test_picoquic_times_are_microseconds():
    """time_units "us": the last event at 161682 us is 161.682 ms after the first."""
    _, rows = _rows("picoquic-qlog_trace_ref.qlog")
    assert max(ts for ts, _ in rows) == 161_682_000


QVIS = Path(__file__).parent / "data" / "qlog"


def _expected(path):
    """(ts_ns, trace number) of every event, computed here from the file: a
    draft-01 trace's reference_time (ms, or s where it holds a decimal
    point: pcap2qlog) plus each event's relative_time in ms."""
    doc = json.loads(path.read_text())
    out = []
    for n, trace in enumerate(doc["traces"]):
        ref = Decimal(trace["common_fields"]["reference_time"])
        ref_ms = ref * 1000 if "." in trace["common_fields"]["reference_time"] else ref
        at = trace["event_fields"].index("relative_time")
        for event in trace["events"]:
            if event:
                out.append((int((ref_ms + Decimal(event[at])) * 1_000_000), n))
    return out


@pytest.mark.parametrize("name, events, malformed, traces", [
    ("doublevantage_100ms.qlog", 6737, 0, 2), ("parallel_10_50KB_f5.qlog", 1549, 0, 1),
    # new_cid ends its events with an empty `[]`: nothing to read, not a malformed record
    ("new_cid.qlog", 34, 0, 1), ("spin_bit.qlog", 34, 0, 1),
])
def test_qvis_qlogs(name, events, malformed, traces):
    parsed = read_log(str(QVIS / name))
    rows = parsed.table.to_pylist()
    assert len(rows) == events and len(parsed.malformed) == malformed
    got = sorted((r["ts_ns"], json.loads(r["fields"])["qlog_trace"]) for r in rows)
    assert got == sorted(_expected(QVIS / name))
    assert len({t for _, t in got}) == traces
    assert parsed.trace_clock_events == 0


def test_two_vantage_points_in_one_file():
    rows = read_log(str(QVIS / "doublevantage_100ms.qlog")).table.to_pylist()
    first = {}
    for r in rows:
        f = json.loads(r["fields"])
        first.setdefault(f["vantage_point"]["type"], r["ts_ns"])
    # the server's trace was started 100 ms after the client's
    assert first == {"client": 1_566_844_755_588_000_000, "server": 1_566_844_755_688_000_000}
    kinds = Counter(r["kind"] for r in rows)
    # draft-01 names read as today's: metric_update -> metrics_updated
    assert kinds["quic_metrics_updated"] == 1817 and "quic_metric_update" not in kinds
    cwnd = [json.loads(r["fields"])["data"].get("cwnd") for r in rows
            if r["kind"] == "quic_metrics_updated"]
    assert cwnd[0] == 12800


PCAP2QLOG_01 = ("pcap2qlog-0.1-handshake_v6_quicker.qlog", "pcap2qlog-0.1-ngtcp2-pcap.qlog")


def _tshark_epochs(name):
    """frame.time_epoch of each frame of the capture pcap2qlog read, as tshark
    printed it (tests/data/qlog/README.md), in ns."""
    lines = (QVIS / "pcap2qlog-0.1.tshark.tsv").read_text().splitlines()[1:]
    return [int(Decimal(c[2]) * 10**9) for c in (ln.split("\t") for ln in lines) if c[0] == name]


@pytest.mark.parametrize("name, packets", [(PCAP2QLOG_01[0], 12), (PCAP2QLOG_01[1], 10)])
def test_pcap2qlog_0_1(name, packets):
    """qlog 0.1 (pcap2qlog, 2018): no `traces`, `starttime` in seconds, `fields`
    naming the event arrays, times in whole ms. Every event read at
    starttime + time (from the file's decimal text); each packet within the
    0.5 ms pcap2qlog rounded to of tshark's time for its frame."""
    path = QVIS / name
    doc = json.loads(path.read_text(), parse_float=Decimal)
    assert doc["qlog_version"] == "0.1" and "traces" not in doc
    at = doc["fields"].index("time")
    want = [int(doc["starttime"] * 10**9 + Decimal(e[at]) * 10**6) for e in doc["events"]]
    parsed = read_log(str(path))
    rows = parsed.table.to_pylist()
    assert parsed.malformed == [] and parsed.records == len(rows) == packets + 1
    assert parsed.trace_clock_events == 0
    assert [r["ts_ns"] for r in rows] == want
    assert [r["kind"] for r in rows] == ["quic_connection_started"] + ["quic_packet_received"] * packets
    fields = json.loads(rows[1]["fields"])
    assert fields["vantage_point"] == {"type": "NETWORK"} and fields["odcid"] == doc["connectionid"]
    epochs = _tshark_epochs(name)
    assert len(epochs) == packets and epochs[0] == want[0]
    assert max(abs(r["ts_ns"] - e) for r, e in zip(rows[1:], epochs)) <= 500_000


def test_quictrace_draft00_every_event_and_the_last():
    """qvis' draft-00 example (quictrace-to-qlog; an excerpt, README): `time_units`
    us, reference_time 0 (no wall clock: the trace's own clock), string times,
    and a final `[]` after the last event -- nothing, not an event (the
    file's summary counts 18,556 events of 18,557 array members)."""
    path = QVIS / "quictrace_example_github-excerpt.qlog"
    doc = json.loads(path.read_text())
    events = doc["traces"][0]["events"]
    assert events[-1] == [] and len(events) == 701
    want = sorted((int(Decimal(e[0]) * 1000), f"{e[1]}:{e[2]}") for e in events if e)
    parsed = read_log(str(path))
    rows = parsed.table.to_pylist()
    assert parsed.malformed == [] and parsed.records == len(rows) == 700
    assert parsed.trace_clock_events == 700
    assert sorted((r["ts_ns"], json.loads(r["fields"])["qlog_name"]) for r in rows) == want
    last = max(rows, key=lambda r: (r["ts_ns"], r["line"]))
    assert (last["ts_ns"], last["kind"]) == (26_678_312_000, "quic_custom_cc_application_limited")
    kinds = Counter(r["kind"] for r in rows)
    assert (kinds["quic_packet_sent"], kinds["quic_packet_received"], kinds["quic_packet_lost"],
            kinds["quic_metrics_updated"]) == (367, 138, 28, 166)
