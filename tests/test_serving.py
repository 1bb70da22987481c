"""Serving metrics against docs/timing-model.md on a static-batching schedule worked by hand.

The log (CSV, to exercise that reader) is what a static-batching server
writes: the batch is prefilled first (5 ms per member), then every decode
step emits one token for each unfinished member; a step costs 10 ms up to 4
members and grows linearly above (the device's balance point); results
return when the whole batch is done.
"""

import pytest

from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.logs import load_logs
from tracekit.readers.events import read_log

BASE = 1_800_000_000_000_000_000
MS = 1_000_000


def step_ms(b):
    return 10 * max(1, b / 4)


def batch_rows(batch, start_ms, tokens):
    b = len(tokens)
    prefill = 5 * b
    end = start_ms + prefill + (max(tokens) - 1) * step_ms(b)
    rows = [(start_ms, "batch_start", "", batch, b, "")]
    for i, n in enumerate(tokens):
        req = f"{batch}-{i}"
        rows.append((start_ms, "request_start", req, batch, "", ""))
        for k in range(n):
            rows.append((start_ms + prefill + k * step_ms(b), "token", req, batch, "", ""))
        rows.append((end, "request_finished", req, batch, "", n))
    return rows, end


@pytest.fixture
def store(db, tmp_path):
    rows, t = [], 0
    for batch, tokens in [("s1", [20]), ("s2", [20]), ("s3", [20]),
                          ("q", [10, 20, 40, 80]), ("o", [10] * 4 + [80] * 4)]:
        more, t = batch_rows(batch, t + 100, tokens)
        rows += more
    lines = ["ts_ns,kind,request,batch,batch_size,tokens"]
    lines += [f"{BASE + round(ts * MS)},{k},{r},{b},{s},{n}" for ts, k, r, b, s, n in sorted(rows, key=lambda x: x[0])]
    path = tmp_path / "serving.csv"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log(str(path))
    assert parsed.format == "csv" and not parsed.malformed
    load_logs(db, [parsed])
    analyze(db)
    return db


def one(con, sql, *params):
    cur = con.execute(sql, list(params))
    return dict(zip([d[0] for d in cur.description], cur.fetchone()))


def test_a_request_alone(store):
    r = one(store, "SELECT * FROM serving WHERE request = 's1-0'")
    assert (r["batch_size"], r["tokens"]) == (1, 20)
    assert r["ttft_ns"] == 5 * MS  # prefill of one
    assert r["tpot_ns"] == 10 * MS
    assert r["e2e_ns"] == (5 + 19 * 10) * MS
    assert r["slowdown"] == 1.0


def test_a_short_request_waits_for_the_long_one(store):
    r = one(store, "SELECT * FROM serving WHERE request = 'q-0'")
    # prefill 4 x 5 = 20 ms; tokens every 10 ms (4 members: at the balance point)
    assert r["ttft_ns"] == 20 * MS and r["tpot_ns"] == 10 * MS
    # its 10 tokens end at 110 ms, but the batch returns after the 80-token member
    assert r["last_token_ns"] - r["arrival_ns"] == 110 * MS
    assert r["e2e_ns"] == (20 + 79 * 10) * MS
    assert r["alone_ns"] == (5 + 9 * 10) * MS
    assert r["slowdown"] == pytest.approx(810 / 95, abs=1e-3)


@pytest.mark.parametrize("batch, waste, tps, tpot_ms", [
    ("q", 1 - 150 / (4 * 80), 150 / 0.810, 10),          # 0.53125
    ("o", 1 - 360 / (8 * 80), 360 / (0.040 + 79 * 0.020), 20),  # 0.4375; steps cost 2x
])
def test_static_batch_waste_and_throughput(store, batch, waste, tps, tpot_ms):
    b = one(store, "SELECT * FROM serving_batches WHERE batch = ?", batch)
    assert b["slot_waste"] == pytest.approx(waste)
    assert b["throughput_tps"] == pytest.approx(tps)
    assert b["tpot_ns"] == tpot_ms * MS
