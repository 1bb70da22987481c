"""qlog files written by other QUIC stacks (../shared/logs, provenance in its
README): every event read, its time exact to the nanosecond from the file's text."""

import pytest

from conftest import SHARED, needs_shared
from tracekit.events import read_log

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
    ("picoquic-qlog_trace_ref.qlog", 104, (0, "quic_datagram_received"),
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
