"""Single-factor comparisons: the ablation table of docs/timing-model.md.

For each combination of the `--by` factors, the arms are the levels of the
compared factor. Per arm: n, completed (the response had the experiment's
exact byte count: the most common bytes_down of the group), the median time
(linear interpolation between the two nearest ranks, numpy's default
'linear' = Hyndman-Fan type 7). Between the first two arms (A, B in the
order given, else sorted): the ratio of medians A / B, the median of paired
ratios (the i-th request of A with the i-th of B in interleaving order:
run order, then start time), a bootstrap 95% confidence interval of the
ratio of medians (each arm resampled independently, 2,000 resamples, seeded:
reproducible), the paired rounds each arm won, and the spans that moved:
for each attribution span the median of its paired differences A - B and
the share of the median total difference it explains. A difference of
medians smaller than the RTT spread in the same runs (p90 - p10 of the
compared requests' own round trip, see _rtt_spread) is flagged: it is no
difference, and its spans' shares are not shown.

Prediction (proof by counterfactual): the first arm has a mechanism the
second lacks; the spans that measure that mechanism in the first arm
predict what removing it saves. `predict` puts the median over the first
arm's requests of those spans' sum beside the measured saving (difference
of medians, with a bootstrap 95 % interval of it); the prediction holds
when it lies in that interval or within 10 % / 10 ms of the saving,
whichever is larger. For a shorter round trip the RTT-bound spans are
scaled instead: each shrinks with R (1 - R_B / R_A of it is saved).
`replayed` predicts with the what-if engine instead (tracekit.whatif: the
first arm's requests calibrate a packet-level replay, predicted saving =
replay(A) - replay(B)); `--predict` without span names uses it for every
factor the replay knows, the spans staying as the evidence of why.
"""

from dataclasses import dataclass, field

import numpy as np

from ..core.errors import TracekitError
from ..core.spans import ROUND_TRIPS
from ..pipeline.runner import run_analysis

RESAMPLES = 2000
SEED = 1


@dataclass
class Arm:
    level: str
    durations: np.ndarray  # ns, in interleaving order
    completed: int
    spans: list  # per request: {span: ns}
    untimed: int = 0  # requests left out: no duration (no response seen), so no timing
    # each request's place in the arm's interleaving order, the untimed ones
    # counted (None: 0, 1, 2, ...): the i-th of one arm pairs with the i-th of the
    # other, and an untimed request takes its pair out, not the pairs after it
    places: np.ndarray | None = None

    def placed(self):
        """{place: index into durations}."""
        places = range(self.n) if self.places is None else self.places
        return {int(p): i for i, p in enumerate(places)}

    @property
    def n(self):
        return len(self.durations)

    @property
    def median(self):
        return float(np.median(self.durations)) if self.n else float("nan")


@dataclass
class Comparison:
    by: tuple
    arms: list
    ratio_of_medians: float = float("nan")
    median_paired_ratio: float = float("nan")
    ci_low: float = float("nan")
    ci_high: float = float("nan")
    pairs: int = 0
    won: tuple = (0, 0)
    spans_moved: list = field(default_factory=list)  # (span, median change ns, share)
    rtt_spread_ns: float = float("nan")
    no_difference: bool = False
    prediction: "Prediction | None" = None

    def label(self, by):
        """"f1=v1, f2=v2" of this row's --by levels ("" without --by)."""
        return ", ".join(f"{f}={v}" for f, v in zip(by, self.by))


# The spans that measure the mechanism a factor's first level has and its second
# lacks (`tracekit ablation --predict` without a span list).
REMOVES = {
    "loss_down": ("loss_recovery", "upload_loss_recovery"),
    "loss": ("loss_recovery", "upload_loss_recovery"),
    "connection": ("connect_tcp", "connect_tls", "connect_quic", "window_waiting"),
    "initcwnd": ("window_waiting",),
    "pacing": ("pacing",),
    "processing_ms": ("processing",),
    "socks": ("connect_proxy",),
}
# Spans that last a round trip or a whole number of them (scaled for rtt_ms)
RTT_BOUND = ROUND_TRIPS  # core/spans.py
TOLERANCE_NS = 10_000_000


@dataclass
class Prediction:
    spans: tuple
    predicted_ns: float
    measured_ns: float
    ci_low_ns: float
    ci_high_ns: float

    @property
    def holds(self):
        inside = self.ci_low_ns <= self.predicted_ns <= self.ci_high_ns
        close = abs(self.predicted_ns - self.measured_ns) <= max(
            0.1 * abs(self.measured_ns), TOLERANCE_NS)
        return bool(inside or close)


def bootstrap_difference_ci(a, b, resamples=RESAMPLES, seed=SEED, level=0.95):
    """Percentile bootstrap CI of median(a) - median(b), arms resampled independently."""
    rng = np.random.default_rng(seed)
    return _percentile_interval(_resampled_medians(a, rng, resamples)
                                - _resampled_medians(b, rng, resamples), level)


def predict(c, compare, spans=None):
    """The saving the first arm's spans predict for removing the factor's
    mechanism, beside the one measured (None when there is nothing to predict)."""
    if len(c.arms) < 2 or not c.arms[0].n or not c.arms[1].n:
        return None
    a, b = c.arms[0], c.arms[1]
    if compare == "rtt_ms" and not spans:
        try:
            scale = 1 - float(b.level) / float(a.level)
        except (ValueError, ZeroDivisionError):
            return None
        names = RTT_BOUND
        per = [scale * sum((s or {}).get(n, 0) for n in names) for s in a.spans]
    else:
        names = tuple(spans or REMOVES.get(compare, ()))
        if not names:
            return None
        per = [sum((s or {}).get(n, 0) for n in names) for s in a.spans]
    low, high = (bootstrap_difference_ci(a.durations, b.durations)
                 if a.n > 1 and b.n > 1 else (float("nan"), float("nan")))
    return Prediction(names, float(np.median(per)), a.median - b.median, low, high)


def replayed(con, c, compare, by=(), where=None, draws=None):
    """The saving the what-if engine predicts for the first arm's level -> the
    second's (replay(A) - replay(B), tracekit.whatif), beside the one measured;
    None when the factor is not in the replay's vocabulary or the engine
    refuses (a tunnel, an unknown rate): the spans are then the prediction."""
    from ..whatif.engine import whatif
    from ..whatif.replayer import DRAWS
    from ..whatif.factors import ALIASES, FACTORS, value
    name = ALIASES.get(compare, compare)
    if len(c.arms) < 2 or not c.arms[0].n or not c.arms[1].n or name not in FACTORS:
        return None
    a, b = c.arms[0], c.arms[1]
    group = {**(where or {}), **dict(zip(by, c.by))}
    try:
        r = whatif(con, group, {name: value(name, a.level)}, {name: value(name, b.level)},
                   draws=draws or DRAWS)
    except TracekitError:
        return None
    low, high = (bootstrap_difference_ci(a.durations, b.durations)
                 if a.n > 1 and b.n > 1 else (float("nan"), float("nan")))
    return Prediction(("replay",), r.saving * 1e9, a.median - b.median, low, high)


def _resampled_medians(values, rng, resamples):
    v = np.asarray(values, dtype=float)
    return np.median(v[rng.integers(0, len(v), (resamples, len(v)))], axis=1)


def _percentile_interval(samples, level):
    tail = (1 - level) / 2 * 100
    return float(np.percentile(samples, tail)), float(np.percentile(samples, 100 - tail))


def bootstrap_ratio_ci(a, b, resamples=RESAMPLES, seed=SEED, level=0.95):
    """Percentile bootstrap CI of median(a) / median(b), arms resampled independently."""
    rng = np.random.default_rng(seed)
    ma = _resampled_medians(a, rng, resamples)
    mb = _resampled_medians(b, rng, resamples)
    return _percentile_interval(ma / mb, level)


def bootstrap_median_ci(values, resamples=RESAMPLES, seed=SEED, level=0.95):
    """Percentile bootstrap CI of one arm's median (the median itself for one value)."""
    if len(values) < 2:
        m = float(np.median(values))
        return m, m
    return _percentile_interval(
        _resampled_medians(values, np.random.default_rng(seed), resamples), level)


def compare_arms(a, b, by=(), rtt_spread_ns=float("nan")):
    """The statistics of arm a against arm b (see the module docstring)."""
    c = Comparison(by=by, arms=[a, b], rtt_spread_ns=rtt_spread_ns)
    if not a.n or not b.n:
        return c
    c.ratio_of_medians = a.median / b.median
    at_a, at_b = a.placed(), b.placed()
    pairs = [(at_a[p], at_b[p]) for p in sorted(at_a) if p in at_b]
    c.pairs = len(pairs)
    ia, ib = [i for i, _ in pairs], [j for _, j in pairs]
    pa, pb = a.durations[ia], b.durations[ib]
    c.median_paired_ratio = float(np.median(pa / pb)) if c.pairs else float("nan")
    c.won = (int(np.sum(pa < pb)), int(np.sum(pb < pa)))
    if a.n > 1 and b.n > 1:
        c.ci_low, c.ci_high = bootstrap_ratio_ci(a.durations, b.durations)
    total = float(np.median(pa - pb)) if c.pairs else 0.0
    sa_, sb_ = [a.spans[i] for i in ia], [b.spans[j] for j in ib]
    names = sorted({k for s in sa_ + sb_ for k in (s or {})})
    for name in names:
        diffs = np.array([(sa or {}).get(name, 0) - (sb or {}).get(name, 0)
                          for sa, sb in zip(sa_, sb_)], dtype=float)
        change = float(np.median(diffs))
        if change:
            c.spans_moved.append((name, change, change / total if total else float("nan")))
    c.spans_moved.sort(key=lambda x: -abs(x[1]))
    c.no_difference = bool(np.isfinite(rtt_spread_ns) and abs(a.median - b.median) < rtt_spread_ns)
    return c


def ablation(con, compare, by=(), levels=None, where=None):
    """[Comparison] for each combination of the `by` factors, over the
    requests whose labels match `where` ({label: value})."""
    where = where or {}
    columns, rows = run_analysis(con, "ablation", compare=compare, by=list(by),
                                 where_keys=list(where), where_values=list(where.values()))
    if not rows:
        raise TracekitError(f"no requests carry the attribute {compare!r}"
                            f"{' with ' + ', '.join(f'{k}={v}' for k, v in where.items()) if where else ''}"
                            f" (a label, a field of their own events, or connection/protocol/vantage/"
                            f"source/capture/log); label runs at ingest (--label {compare}=LEVEL) and run "
                            f"tracekit analyze")
    col = {name: i for i, name in enumerate(columns)}
    groups = {}
    for row in rows:
        groups.setdefault(tuple(row[col["by_levels"]]), []).append(row)
    out = []
    for key, group in sorted(groups.items()):
        found = sorted({r[col["level"]] for r in group})
        order = list(levels) if levels else found
        missing = [lv for lv in order if lv not in found]
        expected = _mode([r[col["bytes_down"]] for r in group])
        arms = []
        for lv in order:
            level = sorted((r for r in group if r[col["level"]] == lv),
                           key=lambda r: (r[col["run_order"]], r[col["start_ns"]]))
            places = [i for i, r in enumerate(level) if (r[col["duration_ns"]] or 0) > 0]
            mine = [level[i] for i in places]
            arms.append(Arm(lv, np.array([r[col["duration_ns"]] for r in mine], dtype=float),
                            sum(1 for r in mine if r[col["bytes_down"]] == expected),
                            [dict(r[col["spans"]]) if r[col["spans"]] else {} for r in mine],
                            len(level) - len(mine), np.array(places)))
        if missing or len(arms) < 2:
            out.append(Comparison(by=key, arms=arms))
            continue
        keys = [r[col["request_key"]] for r in group]
        c = compare_arms(arms[0], arms[1], key, _rtt_spread(con, keys))
        c.arms = arms
        out.append(c)
    return out


def _mode(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    uniq, counts = np.unique(values, return_counts=True)
    return uniq[np.argmax(counts)]


def _rtt_spread(con, request_keys):
    """The RTT spread of the compared requests: p90 - p10 of their round trip
    as the client saw it (last request byte -> first response byte, which
    holds one RTT and the server's time), or of their flows' RTT samples
    when the requests have no packets. Through a tunnel the TCP flow is the
    client's loopback one, so its RTT samples say nothing of the WAN: the
    request's own round trip does."""
    row = con.execute("""
        SELECT quantile_cont(response_first_byte_ns - request_last_byte_ns, 0.9)
             - quantile_cont(response_first_byte_ns - request_last_byte_ns, 0.1)
        FROM requests WHERE list_contains(?, request_key)""", [request_keys]).fetchall()
    value = row[0][0] if row else None
    if value is None:
        row = con.execute("""
            SELECT quantile_cont(s.rtt_ns, 0.9) - quantile_cont(s.rtt_ns, 0.1)
            FROM rtt_samples s
            JOIN (SELECT DISTINCT capture_id, flow_id FROM requests
                  WHERE list_contains(?, request_key)) q USING (capture_id, flow_id)""",
                          [request_keys]).fetchall()
        value = row[0][0] if row else None
    return float(value) if value is not None else float("nan")


def sign_test(wins_a, wins_b):
    """Two-sided exact sign test: the chance of a split at least this uneven
    if each round were a coin toss (ties dropped)."""
    import math
    n = wins_a + wins_b
    if not n:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins_a, wins_b) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def verdict(c):
    """(differs, text) of a Comparison, hedged: "no difference" when the 95 %
    interval of the ratio includes 1, when the rounds won are split (a sign
    test p >= 0.05, or the arm that won more rounds has the longer median),
    or when the medians differ by less than the RTT spread."""
    import math
    if len(c.arms) < 2 or not all(a.n for a in c.arms[:2]):
        return False, "an arm has no requests"
    a, b = c.arms[0].level, c.arms[1].level
    if not math.isfinite(c.ci_low):
        return False, f"too few requests to tell ({a}/{b} = {c.ratio_of_medians:.2f})"
    faster, slower = (a, b) if c.ratio_of_medians < 1 else (b, a)
    wins = c.won if c.ratio_of_medians < 1 else c.won[::-1]
    reasons = []
    if c.ci_low <= 1 <= c.ci_high:
        reasons.append(f"the 95 % interval {c.ci_low:.2f}-{c.ci_high:.2f} includes 1")
    if wins[0] <= wins[1] or sign_test(*c.won) >= 0.05:
        reasons.append(f"rounds won split {c.won[0]}-{c.won[1]}")
    if c.no_difference:
        reasons.append("the medians differ by less than the RTT spread")
    ratio = f"{a}/{b} = {c.ratio_of_medians:.2f}"
    if reasons:
        return False, f"no difference shown: {ratio}, but {' and '.join(reasons)}"
    return True, (f"{faster} faster than {slower}: {ratio} (95 % interval "
                  f"{c.ci_low:.2f}-{c.ci_high:.2f}), {faster} won {wins[0]} of {c.pairs} rounds")
