"""The ablation statistics on arms worked by hand, and the schedule's interleaving."""

import math

import numpy as np
import pytest

from conftest import SHARED, needs_shared

from tracekit.core.errors import TracekitError
from tracekit.lab.experiment import schedule
from tracekit.presentation.ablation import Arm, bootstrap_ratio_ci, compare_arms


def arm(level, durations, spans):
    return Arm(level, np.array(durations, dtype=float), len(durations), spans)


def test_ratios_pairs_and_spans_moved():
    # A pays 5 ms of setup and 2 ms more transfer than B in every pair
    a = arm("direct", [17, 19, 21, 23], [{"setup": 5, "transfer": 12 + i} for i in (0, 2, 4, 6)])
    b = arm("tunnel", [10, 12, 14, 16], [{"setup": 0, "transfer": 10 + i} for i in (0, 2, 4, 6)])
    c = compare_arms(a, b)
    assert c.ratio_of_medians == pytest.approx(20 / 13)  # medians 20 and 13 (type 7: midpoints)
    # paired ratios 17/10, 19/12, 21/14, 23/16: median of 1.5 and 1.5833 -> 1.54167
    assert c.median_paired_ratio == pytest.approx((19 / 12 + 21 / 14) / 2)
    assert c.won == (0, 4) and c.pairs == 4
    assert c.spans_moved == [("setup", 5.0, 5 / 7), ("transfer", 2.0, 2 / 7)]
    assert c.ci_low <= c.ratio_of_medians <= c.ci_high


def test_bootstrap_is_seeded_and_reproducible():
    rng = np.random.default_rng(0)
    a, b = rng.gamma(4, 250, 12), rng.gamma(4, 40, 12)
    assert bootstrap_ratio_ci(a, b) == bootstrap_ratio_ci(a, b)
    lo, hi = bootstrap_ratio_ci(a, b)
    assert lo < np.median(a) / np.median(b) < hi
    assert bootstrap_ratio_ci(a, b, seed=2) != (lo, hi)


def test_a_difference_inside_the_rtt_spread_is_no_difference():
    a = arm("fresh", [240, 242, 238], [{}] * 3)
    b = arm("persistent", [235, 237, 236], [{}] * 3)  # medians 240 and 236
    assert compare_arms(a, b, rtt_spread_ns=5.0).no_difference
    assert not compare_arms(a, b, rtt_spread_ns=1.0).no_difference
    assert not compare_arms(a, b).no_difference  # unknown spread: no verdict either way


def test_unequal_arms_pair_in_order():
    a = arm("a", [4, 8, 6], [{}] * 3)
    b = arm("b", [2, 2], [{}] * 2)
    c = compare_arms(a, b)
    assert c.pairs == 2 and c.median_paired_ratio == 3.0  # 4/2, 8/2
    assert math.isclose(c.ratio_of_medians, 6 / 2)


def test_schedule_interleaves_and_alternates_the_first_level():
    spec = {"trials": 3, "factors": {"path": ["direct", "tunnel"], "conn": ["fresh", "warm"]}}
    plan = schedule(spec)
    assert [o for _, o, _ in plan] == list(range(1, 13))
    rounds = [[tuple(c.values()) for t, _, c in plan if t == k] for k in range(3)]
    first = [("direct", "fresh"), ("direct", "warm"), ("tunnel", "fresh"), ("tunnel", "warm")]
    assert rounds == [first, first[::-1], first]


def test_sign_test_is_the_binomial_tail():
    from math import comb

    from tracekit.presentation.ablation import sign_test
    assert sign_test(0, 9) == 2 / 2 ** 9  # one-sided tail 1/512, doubled
    assert abs(sign_test(5, 15) - 2 * sum(comb(20, i) for i in range(6)) / 2 ** 20) < 1e-15
    assert sign_test(10, 10) == 1.0 and sign_test(0, 0) == 1.0


def test_the_verdict_is_hedged():
    """A difference only when the interval excludes 1, the rounds are not split and
    the medians differ by more than the RTT spread; otherwise no difference, and why."""
    from tracekit.presentation.ablation import verdict
    from tracekit.presentation.table import ablation_rows
    slow = arm("direct", [300.0 + i for i in range(12)], [{}] * 12)
    fast = arm("tunnel", [100.0 + i for i in range(12)], [{}] * 12)
    differs, text = verdict(compare_arms(slow, fast))
    assert differs and text.startswith("tunnel faster than direct: direct/tunnel = 2.") \
        and "tunnel won 12 of 12 rounds" in text
    # the same arms, the pairs interleaved so each arm wins half the rounds
    mixed = arm("tunnel", [100.0 + 400 * (i % 2) for i in range(12)], [{}] * 12)
    differs, text = verdict(compare_arms(slow, mixed))
    assert not differs and text.startswith("no difference shown") and "rounds won split 6-6" in text
    same = arm("tunnel", [299.5 + i for i in range(12)], [{}] * 12)
    differs, text = verdict(compare_arms(slow, same))
    assert not differs and "includes 1" in text
    differs, text = verdict(compare_arms(slow, fast, rtt_spread_ns=500.0))
    assert not differs and "less than the RTT spread" in text
    columns, rows = ablation_rows([compare_arms(slow, fast)], ())
    row = dict(zip(columns, rows[0]))
    assert (row["pairs"], row["won"], row["lost"]) == (12, 0, 12)
    assert isinstance(row["ci_low"], float) and row["ci_low"] < row["ratio"] < row["ci_high"]


def test_by_and_where_read_the_requests_own_event_fields(tmp_path):
    """`mode` and any other scalar field a request's own events carry group and
    filter like labels and columns do (issue #26 item 6): no splitting of logs by hand."""
    import json
    from pathlib import Path

    import tracekit
    from tracekit.presentation.ablation import ablation

    lab = Path(__file__).resolve().parents[1] / "captures" / "lab"
    with tracekit.open(str(tmp_path / "m.duckdb")) as s:
        for run, mode in (("counterfactual-001", "fresh"), ("counterfactual-002", "persistent")):
            log = tmp_path / f"{run}.jsonl"
            with open(lab / run / "client-events.jsonl") as f, open(log, "w") as out:
                for line in f:
                    record = json.loads(line)
                    record.pop("connection", None)
                    if record["kind"] == "request_start":  # the attribute lives on one event
                        record.update(mode=mode, shard="even" if record["request"] != "r1" else "odd")
                    out.write(json.dumps(record) + "\n")
            s.ingest([str(lab / run / "client.pcap"), str(log)], labels={"experiment": "modes"})
        s.analyze()
        rows = ablation(s.con, "mode", by=("shard",), levels=["fresh", "persistent"],
                        where={"experiment": "modes"})
        assert {r.by: (r.arms[0].n, r.arms[1].n) for r in rows} == {("even",): (2, 2), ("odd",): (1, 1)}
        # columns too: the request's connection, and a where on an event field
        rows = ablation(s.con, "mode", by=("connection",), levels=["fresh", "persistent"],
                        where={"shard": "odd"})
        assert {r.by: (r.arms[0].n, r.arms[1].n) for r in rows} == {("fresh",): (1, 0),
                                                                     ("reused",): (0, 1)}
        with pytest.raises(TracekitError, match="no requests carry the attribute 'mode'"):
            ablation(s.con, "mode", where={"shard": "none"})
        # the what-if groups and selects by the same attributes (request_attributes.sql)
        from tracekit.presentation.whatif import groups
        from tracekit.whatif.calibrate import load_requests
        assert groups(s.con, {"experiment": "modes"}, ["mode"]) == [
            {"experiment": "modes", "mode": "fresh"}, {"experiment": "modes", "mode": "persistent"}]
        assert sorted(load_requests(s.con, {"shard": "odd"}).connection) == ["fresh", "reused"]
        # and by the file a request was found in: its event log's, its capture's
        assert groups(s.con, {}, ["log"]) == [{"log": "counterfactual-001.jsonl"},
                                              {"log": "counterfactual-002.jsonl"}]
        rows = ablation(s.con, "log", levels=["counterfactual-001.jsonl", "counterfactual-002.jsonl"],
                        where={"protocol": "tcp"})
        assert [tuple(a.n for a in r.arms) for r in rows] == [(3, 3)]
        # (both runs' captures are client.pcap: told apart by their paths)
        assert groups(s.con, {}, ["capture"]) == [
            {"capture": str(lab / run / "client.pcap")}
            for run in ("counterfactual-001", "counterfactual-002")]


@needs_shared
def test_a_request_that_took_no_time_is_left_out_and_counted(tmp_path):
    """A request whose response was not seen has a duration of 0 (12 in the
    shared captures, 2 in the ppp test suite's raw-IP one): its pair's ratio
    was infinite, numpy warned on the user's terminal and the paired median
    moved. It is left out of its arm and counted, and the command says so."""
    import tracekit
    from tracekit.cli import main
    from click.testing import CliRunner
    db = str(tmp_path / "z.duckdb")
    with tracekit.open(db) as s:
        s.ingest([str(SHARED / "ppp__raw_ip.pcap")])
        s.analyze()
        rows = s.con.execute("SELECT connection, count(*) FILTER (duration_ns > 0), "
                             "count(*) FILTER (duration_ns = 0) FROM requests GROUP BY 1 "
                             "ORDER BY 1").fetchall()
        assert rows == [("fresh", 4, 0), ("reused", 5, 2)], rows
        c, = s.comparisons("connection")
        assert [(a.level, a.n, a.untimed) for a in c.arms] == [("fresh", 4, 0), ("reused", 5, 2)]
        assert np.isfinite(c.median_paired_ratio) and np.isfinite(c.ci_high)
    r = CliRunner().invoke(main, ["ablation", "--db", db, "--compare", "connection"])
    assert r.exit_code == 0, r.output
    assert "warning: all requests: 2 reused request(s) left out: no duration" in r.output


def test_an_untimed_request_takes_its_pair_out_not_the_pairs_after_it():
    """The i-th request of one arm pairs with the i-th of the other in the
    interleaving order; one without a duration (left out of its arm) leaves
    its place empty. Shifted, A's 6 would pair with B's 4 (median ratio 1.75)."""
    from tracekit.presentation.ablation import Arm, compare_arms
    a = Arm("fresh", np.array([4.0, 6.0, 8.0]), 3, [{"x": 1.0}, {"x": 2.0}, {"x": 5.0}])
    b = Arm("reused", np.array([2.0, 4.0]), 2, [{"x": 0.0}, {"x": 1.0}], untimed=1,
            places=np.array([0, 2]))
    c = compare_arms(a, b)
    assert (c.pairs, c.median_paired_ratio, c.won) == (2, 2.0, (0, 2))
    assert c.spans_moved[0][:2] == ("x", 2.5)  # (1 - 0 and 5 - 1)


def test_the_readme_ablation_is_what_the_command_prints(demo_store):
    """The README's example output is the command's, on the store `make demo`
    builds (it drifted once: a span's figure changed and the page kept the old)."""
    import re
    from pathlib import Path

    from click.testing import CliRunner

    from tracekit.cli import main
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"```text\n\$ tracekit (ablation[^\n]*)\n(.*?)```", readme, re.S)
    assert block, "README.md has no ablation example"
    r = CliRunner().invoke(main, [*block.group(1).split(), "--db", str(demo_store)])
    assert r.exit_code == 0, r.output
    got = [line.rstrip() for line in r.stdout.splitlines() if line.strip()]
    assert got == [line.rstrip() for line in block.group(2).splitlines() if line.strip()]
