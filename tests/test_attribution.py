"""Attribution and ablation on the reference runs in captures/ (real kernel TCP
over the emulated WAN, kcptun for the tunnel; captures/make_experiments.py).

Checked: every request's spans add up to its measured time to the
nanosecond; the irreducible spans add up to its serial bound (to within the
serialisation of a one-packet request, which no capture can see); residuals
stay small; and the single-factor comparisons behave as the mechanisms say
(docs/timing-model.md): removing loss removes the loss-recovery span and about that
much time; a warm connection removes the setup and the window waiting; the
tunnel beats fresh direct connections several times over.
"""

from pathlib import Path

import pytest

from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.captures import load_captures
from tracekit.pipeline.ingest import ingest_runs
from tracekit.pipeline.manifests import read_manifest
from tracekit.presentation.ablation import ablation
from tracekit.store.db import connect

SAMPLES = Path(__file__).resolve().parents[1] / "captures"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    con = connect(tmp_path_factory.mktemp("attr") / "a.duckdb")
    load_captures(con, [SAMPLES / "http-fresh-vs-persistent.pcap", SAMPLES / "lossy-download-client.pcap",
                        SAMPLES / "lossy-download-server.pcap"])
    for name in ("cross-region", "counterfactual"):
        ingest_runs(con, read_manifest(SAMPLES / "lab" / f"{name}.runs.json"))
    analyze(con)
    yield con
    con.close()


def test_spans_add_up_to_the_measured_time_exactly(store):
    bad = store.execute("""
        SELECT r.request_key, r.duration_ns, sum(a.ns)
        FROM requests r JOIN attribution a USING (request_key)
        GROUP BY ALL HAVING sum(a.ns) <> r.duration_ns""").fetchall()
    assert bad == []
    n = store.execute("SELECT count(*) FROM requests").fetchall()[0][0]
    assert n == store.execute("SELECT count(DISTINCT request_key) FROM attribution").fetchall()[0][0]
    assert n >= 120  # 116 lab requests and the samples' exchanges


def test_irreducible_spans_add_up_to_the_bound(store):
    """The irreducible spans are the bound, to the nanosecond, direct and through
    the tunnel (whose WAN time holds the part of S_d / B that crossed it)."""
    rows = store.execute("""
        SELECT b.request_key, b.bound_ns, sum(a.ns) FILTER (a.irreducible),
            bool_or(a.span LIKE 'tunnel_%') AS tunnel, coalesce(b.upload_ns, 0)
        FROM bounds b JOIN attribution a USING (request_key)
        WHERE b.vantage <> 'server'
        GROUP BY ALL""").fetchall()
    assert len(rows) >= 116
    assert sum(1 for r in rows if r[3]) == 40  # the tunnel arm's requests
    for key, bound, irreducible, tunnel, upload in rows:
        # one account (issue #26): a one-packet request's upload crosses the bottleneck
        # in the wait, the tunnel's WAN time holds the transfer
        assert irreducible == bound, key


def test_unexplained_time_is_small_on_the_reference_runs_and_flagged_when_not(store):
    """Every lab request (events from both ends, a client-side capture) is
    explained to within 10 % (seen: at most 5.2 %); the sample exchanges
    inferred from bare captures, with no server log, are flagged where their
    server time is not known."""
    shares = dict(store.execute("""
        SELECT r.request_key, coalesce(sum(a.ns) FILTER (a.span = 'unexplained'), 0)
            / any_value(r.duration_ns)
        FROM requests r JOIN attribution a USING (request_key)
        WHERE r.labels['experiment'] IS NOT NULL GROUP BY ALL""").fetchall())
    assert len(shares) == 116
    assert max(shares.values()) < 0.10
    from tracekit.pipeline.runner import run_analysis
    columns, rows = run_analysis(store, "views/attribute", run=None)
    view = {r[0]: dict(zip(columns, r)) for r in rows}
    for key, share in shares.items():
        assert view[key]["flag"] is None, key
    # above 10 % and above the noise floor: the RTT spread of the request's path in
    # its capture (p90 - p10 of the server leg's samples; the clocks here are ns)
    import numpy as np
    samples = {}
    for cap, path, rtt in store.execute("""
            SELECT s.capture_id, coalesce(c.labels['path'], f.server_addr), s.rtt_ns
            FROM rtt_samples s JOIN flows f USING (capture_id, flow_id) JOIN captures c USING (capture_id)
            WHERE s.direction = 'c2s' AND s.kind <> 'handshake'""").fetchall():
        samples.setdefault((cap, path), []).append(rtt)
    where = {k: (cap, path) for k, cap, path in store.execute(
        "SELECT r.request_key, r.capture_id, b.path FROM requests r JOIN bounds b USING (request_key)").fetchall()}
    flagged = within = 0
    for key, row in view.items():
        if row["unexplained_pct"] and row["unexplained_pct"] > 10 and row["flag"] != "no flow linked":
            s = samples.get(where[key], [0])
            floor_ms = max(0.002, (np.percentile(s, 90) - np.percentile(s, 10)) / 1e6)
            if abs(row["unexplained_ms"] - floor_ms) < 0.05:
                continue  # the view's ms are rounded to 0.1
            if row["unexplained_ms"] > floor_ms:
                assert row["flag"] == "unexplained > 10%", key
                flagged += 1
            else:
                assert row["flag"] is None, key
                within += 1
    # http-fresh-vs-persistent.pcap: its 4 fresh exchanges wait 1.1-3.0 ms for their
    # server, beyond the path's 0.78 ms spread; the 2 reused 0.7-0.8 ms, within it
    assert flagged >= 4 and within >= 1


def median_span(results, level, span):
    import numpy as np
    for c in results:
        for a in c.arms:
            if a.level == level:
                return float(np.median([s.get(span, 0) for s in a.spans]))


def test_removing_loss_removes_the_loss_recovery_span(store):
    for conn in ("fresh", "persistent"):
        (c,) = ablation(store, "loss_down", levels=["0.05", "0.0"],
                        where={"experiment": "counterfactual", "connection": conn})
        lossy, clean = c.arms
        assert median_span([c], "0.0", "loss_recovery") == 0
        lost = median_span([c], "0.05", "loss_recovery")
        assert lost > 100e6  # at least one round trip of recovery
        assert lossy.median - clean.median > 0.5 * lost, conn


def test_a_warm_connection_removes_setup_and_window_waiting(store):
    (c,) = ablation(store, "connection", levels=["fresh", "persistent"],
                    where={"experiment": "counterfactual", "loss_down": "0.0"})
    fresh, warm = c.arms
    assert median_span([c], "persistent", "connect_tcp") == 0
    assert median_span([c], "fresh", "connect_tcp") == pytest.approx(100e6, rel=0.05)  # 1 RTT
    moved = dict((name, change) for name, change, _ in c.spans_moved)
    explained = moved["connect_tcp"] + moved["window_waiting"]
    assert explained == pytest.approx(fresh.median - warm.median, rel=0.1)


def test_the_tunnel_beats_fresh_direct_connections(store):
    results = ablation(store, "path", by=["connection"], levels=["direct", "tunnel"],
                       where={"experiment": "cross-region"})
    fresh = next(c for c in results if c.by == ("fresh",))
    persistent = next(c for c in results if c.by == ("persistent",))
    assert fresh.ratio_of_medians > 2 and fresh.ci_low > 2
    assert fresh.won == (0, fresh.pairs) and fresh.pairs == 20
    # persistent, tuned connections close most of the gap (docs/timing-model.md)
    assert persistent.ratio_of_medians < fresh.ratio_of_medians / 2
    top = [name for name, _, _ in fresh.spans_moved[:3]]
    # the direct path loses time to loss recovery and window waiting; the tunnel's
    # own time is its transit across the WAN (not "server idle")
    assert set(top) == {"loss_recovery", "window_waiting", "tunnel_transit"}
    assert all(change < 0 for name, change, _ in fresh.spans_moved if name.startswith("tunnel_"))
    moved = {name: change for name, change, _ in fresh.spans_moved}
    assert moved["connect_tcp"] == pytest.approx(100e6, rel=0.05)  # the direct path's handshake
    # through the tunnel the TCP handshake is local and the session warm
    assert median_span([fresh], "tunnel", "connect_tcp") < 1e6


def test_attribution_in_parts_equals_one_part(store, monkeypatch):
    """Attribution runs in parts of requests (bounded memory at any store size),
    each reading the request tables filtered by a range of request_key:
    three parts give the same rows as one, tunnel spans included. The rows
    are read from the `sources` it is given (as an analyze passes the tables
    it is building), not from a view's query read back; the caller's views
    of those names are left as they were."""
    from tracekit.pipeline.analyze import PartitionedStoreStep
    whole = store.execute("SELECT * FROM attribution ORDER BY ALL").fetchall()
    (n,), = store.execute("SELECT count(*) FROM requests").fetchall()
    assert n > 30 and any(r[2].startswith("tunnel_") for r in whole)
    monkeypatch.setattr(PartitionedStoreStep, "PART_REQUESTS", n // 3 + 1)
    views, real = [], PartitionedStoreStep._part_views

    def spied(self, con, parts, sources):
        part_view = real(self, con, parts, sources)
        views.append([part_view("requests", k) for k in range(parts)])
        return part_view
    monkeypatch.setattr(PartitionedStoreStep, "_part_views", spied)
    # as within an analyze: the request tables' rows are elsewhere (" AS " in
    # their names, which the old reading of a view's text split at), and the
    # names read through temporary views of them
    tables = PartitionedStoreStep.PART_TABLES
    built = {t: f'"{t} AS built"' for t in tables}
    for t in tables:
        store.execute(f"CREATE TABLE {built[t]} AS SELECT * FROM {t}")
        store.execute(f"CREATE TEMP VIEW {t} AS SELECT * FROM {built[t]}")
    try:
        PartitionedStoreStep("attribution").write_all(store, "attribution_parts", built)
        shown = {t: store.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in tables}
        parts = store.execute("SELECT * FROM attribution_parts ORDER BY ALL").fetchall()
    finally:
        for t in tables:
            store.execute(f"DROP VIEW IF EXISTS temp.{t}")
            store.execute(f"DROP TABLE IF EXISTS {built[t]}")
        store.execute("DROP TABLE IF EXISTS attribution_parts")
    assert len(views) == 1 and len(views[0]) == 3 and all("AS built" in v for v in views[0])
    assert "request_key <" in views[0][0] and "request_key >=" in views[0][2]
    assert shown == {t: n for t in tables}  # the whole tables again, not a part's views
    assert parts == whole


def test_attribution_parts_split_the_requests_once_whatever_their_keys():
    """The parts' ranges of request_key cover every request once: keys with
    quotes (a log's request ids are the user's) and a request without a key
    (it goes with the first part), the parts about equal in size."""
    import duckdb
    from tracekit.pipeline.stepkinds import PartitionedStoreStep
    con = duckdb.connect()
    con.execute("CREATE TABLE r AS SELECT 'log1:' || i || CASE WHEN i % 7 = 0 THEN $$'x$$ "
                "ELSE '' END AS request_key FROM range(20000) t(i) UNION ALL SELECT NULL")
    step = PartitionedStoreStep("attribution")
    view = step._part_views(con, 4, {t: "r" for t in step.PART_TABLES})
    counts = [con.execute(f"SELECT count(*) FROM ({view('requests', k)})").fetchall()[0][0]
              for k in range(4)]
    every = con.execute(" UNION ALL ".join(f"SELECT * FROM ({view('bounds', k)})"
                                           for k in range(4))).fetchall()
    assert sorted(every, key=str) == sorted(con.execute("SELECT * FROM r").fetchall(), key=str)
    assert con.execute(f"SELECT count(*) FROM ({view('requests', 0)}) WHERE request_key IS NULL"
                       ).fetchall() == [(1,)]
    assert all(4000 <= c <= 6000 for c in counts), counts


def test_analyze_gives_attribution_in_parts_this_runs_request_tables(store, monkeypatch):
    """Within an analyze, attribution's parts read the request tables this run
    is building (storewide passes them), not the stored ones: with requests
    missing from the stored tables (an older analyze's), the rebuilt
    attribution still has every request's spans, as one part gives them."""
    from tracekit.pipeline.analyze import PartitionedStoreStep
    whole = store.execute("SELECT * FROM attribution ORDER BY ALL").fetchall()
    (n,), = store.execute("SELECT count(*) FROM requests").fetchall()
    monkeypatch.setattr(PartitionedStoreStep, "PART_REQUESTS", n // 3 + 1)
    store.execute("DELETE FROM analysis_runs WHERE capture_id = 0")  # the store steps again
    for t in PartitionedStoreStep.PART_TABLES:  # (what the stored tables lack)
        store.execute(f"DELETE FROM store.{t} WHERE hash(request_key) % 2 = 0")
    analyze(store)
    assert store.execute("SELECT * FROM attribution ORDER BY ALL").fetchall() == whole


def test_attribution_span_names_match_their_times():
    """attribution.sql lists the spans' names (span_cols) and their times
    (spans_rows' span_ns) in two places: the same columns in the same order,
    each a span of the catalogue."""
    import re
    from tracekit.store.db import analyses_dir
    sql = (analyses_dir() / "attribution.sql").read_text()
    names = re.search(r"span_cols AS \(.*?SELECT \[(.*?)\] AS cols", sql, re.S).group(1)
    times = re.search(r"AS loss_rows,\s*\[(.*?)\] AS span_ns", sql, re.S).group(1)
    names = [x.strip().strip("'") for x in names.split(",")]
    times = [x.strip() for x in times.split(",")]
    catalogue = set(re.findall(r"\('([a-z_]+)', \d+, '[a-z_]+', '[a-z]+'", sql))
    assert names == times and len(names) == 36 and len(set(names)) == 36
    assert set(names) | {"loss_recovery"} == catalogue


def _store_folder(store):
    """The folder of the store's file (where the docs say scratch folders go)."""
    return Path(store.execute("SELECT path FROM duckdb_databases() "
                              "WHERE database_name = current_database()").fetchone()[0]).parent


@pytest.mark.parametrize("spill", [True, False])
def test_request_phases_in_partitions_equal_one_partition(store, monkeypatch, spill):
    """request_phases runs in partitions of flows (bounded memory), each reading
    its own rows from a scratch folder (many partitions) or straight from the
    tables (few): many partitions give the rows of one either way, and the
    folder is gone afterwards."""
    from tracekit.pipeline.steps import phases, phases_sql
    monkeypatch.setattr(phases_sql, "DIRECT_PARTS", 0 if spill else 10 ** 6)
    read = {"spilled": 0, "direct": 0}
    for name in read:  # (which way each partition's rows came)
        def counted(*args, real=getattr(phases_sql, name), name=name):
            read[name] += 1
            return real(*args)
        monkeypatch.setattr(phases_sql, name, counted)
    whole = store.execute("SELECT * FROM request_phases ORDER BY ALL").fetchall()
    totals = store.execute("SELECT sum(gap_clocked_ns), sum(gap_beyond_ns), "
                           "sum(down_loss_recovery_ns), sum(len(loss_rounds)) "
                           "FROM request_phases").fetchone()
    assert all(t > 0 for t in totals)  # gaps, loss and rounds are in what is compared
    (flows,), = store.execute("SELECT count(DISTINCT (capture_id, flow_id)) FROM requests "
                              "WHERE capture_id IS NOT NULL").fetchall()
    monkeypatch.setattr(phases, "PART_RUNS", 1)  # a partition per flow
    assert len(phases.partitions(store)) == flows + 1  # and the requests without a flow
    folder = _store_folder(store)
    phases.build_all(store, "request_phases_parts")
    assert not list(folder.glob(".tracekit-phases-*"))  # its scratch folder is gone
    assert read == {"spilled": int(spill), "direct": int(not spill)}
    assert store.execute("SELECT * FROM request_phases_parts ORDER BY ALL").fetchall() == whole
    store.execute("DROP TABLE request_phases_parts")


def test_request_phases_that_fail_midway_leave_no_writer_or_scratch(store, monkeypatch):
    """request_phases appends on a thread while the next partition is built: a
    partition that fails raises its own error, the appending thread is
    stopped and the scratch folder removed."""
    import threading

    from tracekit.pipeline.steps import phases
    from tracekit.store.writer import AppendWriter
    monkeypatch.setattr(phases, "PART_RUNS", 1)
    built, real = [], phases._partition

    def failing(con, part, files):
        if len(built) == 2:
            raise ValueError("an absurd partition")
        built.append(part)
        return real(con, part, files)
    monkeypatch.setattr(phases, "_partition", failing)
    folder = _store_folder(store)
    with pytest.raises(ValueError, match="an absurd partition"):
        phases.build_all(store, "request_phases_failed")
    assert len(built) == 2
    assert not [t for t in threading.enumerate() if isinstance(t, AppendWriter)]
    assert not list(folder.glob(".tracekit-phases-*"))
    store.execute("DROP TABLE request_phases_failed")


def test_download_gap_inputs_equal_their_definition_in_sql(store):
    """The server's data packets that download_gaps reads (previous data packet,
    the client's last packet before it, the full segment size) are computed
    by a pass over each flow's packets; here the same from SQL windows."""
    from tracekit.pipeline.steps import phases
    expected = store.execute("""
        WITH n AS (SELECT DISTINCT q.capture_id, q.flow_id, f.client_mss
                   FROM requests q JOIN flows f USING (capture_id, flow_id)
                   WHERE q.vantage <> 'server' OR f.protocol = 'udp'),
        p AS (
            SELECT t.capture_id, t.flow_id, t.ts_ns, t.from_client, t.payload_bytes,
                lag(t.ts_ns) OVER w AS prev_ns, lag(t.payload_bytes) OVER w AS prev_bytes,
                coalesce(n.client_mss - 40, max(t.payload_bytes) OVER (
                    PARTITION BY t.capture_id, t.flow_id, t.from_client)) AS full_bytes,
                max(CASE WHEN t.from_client THEN t.ts_ns END) OVER (
                    PARTITION BY t.capture_id, t.flow_id ORDER BY t.frame
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS last_client_ns
            FROM packets t JOIN n USING (capture_id, flow_id)
            WHERE t.payload_bytes > 0 OR t.from_client
            WINDOW w AS (PARTITION BY t.capture_id, t.flow_id, t.from_client ORDER BY t.frame))
        SELECT capture_id * 4294967296 + flow_id, ts_ns, prev_ns, prev_bytes, full_bytes,
               coalesce(last_client_ns, -9223372036854775807)
        FROM p WHERE NOT from_client AND payload_bytes > 0 AND prev_ns IS NOT NULL
        ORDER BY ALL""").fetchall()
    assert len(expected) > 1000 and len({r[4] for r in expected}) > 1
    phases.flow_parts(store, phases.partitions(store))
    try:
        got = phases.pauses(phases._fetch(store, phases.PACKETS_SQL))
    finally:
        store.execute("DROP TABLE temp._phase_flows; DROP TABLE temp._phase_parts")
    cols = ("flow_key", "ts_ns", "prev_ns", "prev_bytes", "full_bytes", "last_client_ns")
    assert sorted(zip(*(got[c].tolist() for c in cols))) == expected
