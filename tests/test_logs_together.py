"""Small event logs normalised together (tracekit.readers.events.read_logs) give what
each gives read alone: rows, malformed records with their lines, counts."""

from pathlib import Path

import pytest
from conftest import SHARED

from tracekit.core.errors import TracekitError
from tracekit.readers import events

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parent / "captures"
TIMELESS_AT = 1_780_000_000_000_000_000  # for bench reports, TSV, /metrics without a time


def _logs(tmp_path):
    paths = sorted((HERE / "data" / "queqiao").glob("*.*")) + sorted((HERE / "data" / "har").glob("*.har"))
    paths += sorted((HERE / "data" / "qlog").glob("*.qlog")) + sorted(p for p in SAMPLES.glob("*.jsonl") if "drops" not in p.name)
    logs = SHARED.parent / "logs"
    if logs.is_dir():
        paths += sorted(p for p in logs.iterdir() if p.suffix in (".qlog", ".sqlog")
                        and p.stat().st_size <= events.SMALL_LOG)
    bad = tmp_path / "half-bad.jsonl"  # malformed records among good ones, lines kept
    bad.write_text('{"ts_ns": 1780000000000000000, "kind": "a"}\nnot json\n'
                   '{"ts_ns": 17, "kind": "b"}\n{"ts": "2026-08-18T10:00:00Z", "kind": "c"}\n')
    return [str(p) for p in paths if p.suffix != ".md"][:9] + [str(bad)] + \
        [str(p) for p in paths if p.suffix != ".md"][9:]


def _facts(p):
    return (p.path, p.format, p.records, p.malformed, p.private_dropped, p.negative_deltas,
            p.counter_resets, p.trace_clock_events, p.time_stated, p.table.to_pylist())


def test_logs_read_together_equal_each_read_alone(tmp_path):
    paths = _logs(tmp_path)
    together = events.read_logs(paths, time_ns=TIMELESS_AT)
    alone = [events.read_log(p, time_ns=TIMELESS_AT) for p in paths]
    assert len(paths) > 20 and sum(p.table.num_rows for p in alone) > 1_000
    assert len({p.format for p in alone}) >= 6  # jsonl, qlog, har, queqiao and its tables
    for t, a in zip(together, alone):
        assert _facts(t) == _facts(a), t.path
    half = together[9]
    assert half.table.column("line").to_pylist() == [1, 4] and [n for n, _ in half.malformed] == [2, 3]


def test_an_empty_log_among_others_is_named_first_in_order(tmp_path):
    paths = _logs(tmp_path)[:4]
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"kind": "no time"}\n')
    missing = tmp_path / "gone.jsonl"
    with pytest.raises(TracekitError, match="empty.jsonl: no event could be read"):
        events.read_logs(paths[:2] + [str(empty)] + paths[2:] + [str(missing)], time_ns=TIMELESS_AT)
