"""Charts of attribution and ablation (Altair): grouped bars of each arm's
median with its bootstrap 95% interval, the spans of one request as a
waterfall, and each arm's median spans stacked."""

import numpy as np

from ..core.errors import TracekitError
from ..core.spans import COLORS
from .ablation import bootstrap_median_ci
from .charts import _alt

SPAN_COLORS = COLORS  # every span attribution.sql names (core/spans.py)


def ablation_bars(results, by):
    """Each arm's median (ms) with a bootstrap 95% interval, grouped by the --by levels."""
    alt = _alt()
    import pandas as pd
    rows = []
    for c in results:
        group = c.label(by) or "all"
        for a in c.arms:
            if not a.n:
                continue
            lo, hi = bootstrap_median_ci(a.durations)
            rows.append({"group": group, "arm": a.level, "median_ms": a.median / 1e6,
                         "lo_ms": lo / 1e6, "hi_ms": hi / 1e6, "n": a.n})
    if not rows:
        raise TracekitError("no arm has requests")
    df = pd.DataFrame(rows)
    x = alt.X("group:N", title=None, axis=alt.Axis(labelAngle=0))
    bars = alt.Chart(df).mark_bar().encode(
        x=x, xOffset=alt.XOffset("arm:N"), color=alt.Color("arm:N", title="arm"),
        y=alt.Y("median_ms:Q", title="median request time (ms)"),
        tooltip=["group", "arm", "n", "median_ms", "lo_ms", "hi_ms"])
    err = alt.Chart(df).mark_errorbar(color="black", ticks=True).encode(
        x=x, xOffset=alt.XOffset("arm:N"), y=alt.Y("lo_ms:Q", title="median request time (ms)"),
        y2="hi_ms:Q")
    return alt.layer(bars, err).properties(width=520, height=340,
                                           title="Median request time by arm (bootstrap 95% interval)")


def waterfall(con, request_key):
    """The spans of one request as a timeline: one after another in the order
    attribution.sql lays them (span_order; within a span, episodes and rounds
    in numeric order, not as strings), irreducible ones solid."""
    alt = _alt()
    df = con.execute("""
        SELECT span || coalesce(' (' || detail || ')', '') AS label, span, ns::DOUBLE / 1e6 AS ms,
               irreducible, span_order
        FROM attribution WHERE request_key = ?
        ORDER BY span_order, list_transform(regexp_extract_all(coalesce(detail, ''), '[0-9]+'),
                                            lambda d: d::BIGINT), detail""", [request_key]).df()
    if df.empty:
        raise TracekitError(f"no request {request_key!r} in attribution (see tracekit requests)")
    df["end_ms"] = df["ms"].cumsum()
    df["start_ms"] = df["end_ms"] - df["ms"]
    df["order"] = range(len(df))
    scale = alt.Scale(domain=list(SPAN_COLORS), range=list(SPAN_COLORS.values()))
    bars = alt.Chart(df).mark_bar().encode(
        y=alt.Y("label:N", sort=alt.EncodingSortField("order"), title=None),
        x=alt.X("start_ms:Q", title="time since the request started (ms)"), x2="end_ms:Q",
        color=alt.Color("span:N", scale=scale, legend=None),
        opacity=alt.condition("datum.irreducible", alt.value(1.0), alt.value(0.6)),
        tooltip=["span", "label", "ms", "irreducible"])
    return bars.properties(width=700, height=24 * len(df) + 40, title=alt.TitleParams(
        f"Where the time of request {request_key} went, in order",
        subtitle="solid: irreducible (part of the serial bound); light: the rest"))


def attribution_stacked(results, by):
    """Each arm's median time per span, stacked, per --by level."""
    alt = _alt()
    import pandas as pd
    rows = []
    for c in results:
        group = c.label(by) or "all"
        for a in c.arms:
            names = sorted({k for s in a.spans for k in s})
            for name in names:
                rows.append({"group": group, "arm": a.level, "span": name,
                             "ms": float(np.median([s.get(name, 0) for s in a.spans])) / 1e6})
    if not rows:
        raise TracekitError("no attributed requests")
    df = pd.DataFrame(rows)
    scale = alt.Scale(domain=list(SPAN_COLORS), range=list(SPAN_COLORS.values()))
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("arm:N", title="arm"), y=alt.Y("sum(ms):Q", title="median time per span (ms)"),
        color=alt.Color("span:N", scale=scale, title="span"),
        column=alt.Column("group:N", title=None), tooltip=["group", "arm", "span", "ms"],
    ).properties(width=160, height=340, title="Attribution per arm (medians of each span)")
