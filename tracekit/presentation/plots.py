"""Which chart `tracekit plot KIND` draws, from which tables, and its default name."""

from ..core.errors import TracekitError

FLOW_CHARTS = ("time-sequence", "inflight", "rtt")
APP_CHARTS = ("buffer", "chunks", "serving", "streams")
ATTRIBUTION_CHARTS = ("waterfall", "ablation", "attribution")
KINDS = FLOW_CHARTS + APP_CHARTS + ATTRIBUTION_CHARTS


def draw(con, kind, flow_id=None, capture_id=None, direction="s2c", stream=None, run=None,
         request_key=None, compare=None, by=(), levels=None, where=None, t_from=None, t_to=None):
    """(Altair chart, default file stem) of one kind of chart."""
    from . import app_charts, charts
    if kind in ATTRIBUTION_CHARTS:
        from . import ablation_charts
        if kind == "waterfall":
            if not request_key:
                raise TracekitError("the waterfall chart needs --request KEY (see tracekit requests)")
            return (ablation_charts.waterfall(con, request_key),
                    f"waterfall-{request_key.replace(':', '-')}")
        if not compare:
            raise TracekitError(f"the {kind} chart needs --compare FACTOR")
        from .ablation import ablation
        results = ablation(con, compare, by, levels, where or {})
        chart = (ablation_charts.ablation_bars(results, by) if kind == "ablation"
                 else ablation_charts.attribution_stacked(results, by))
        return chart, f"{kind}-{compare}"
    if kind == "streams":  # --stream names the connection (issue #27)
        from .stream_charts import streams_timeline
        chart, connection = streams_timeline(con, stream)
        return chart, f"streams-{connection.replace(':', '-')}"
    if kind in APP_CHARTS:
        chart = {"buffer": lambda: app_charts.playback_buffer(con, stream),
                 "chunks": lambda: app_charts.chunk_timeline(con, stream),
                 "serving": lambda: app_charts.serving(con, run)}[kind]()
        return chart, (kind if kind == "serving" else f"{kind}-{stream or 'stream'}")
    if flow_id is None:
        raise TracekitError(f"the {kind} chart needs --flow (see tracekit sessions)")
    if capture_id is None:
        ids = [r[0] for r in con.execute("SELECT capture_id FROM captures").fetchall()]
        if len(ids) != 1:
            raise TracekitError(f"the store holds {len(ids)} captures; choose one with --capture")
        capture_id = ids[0]
    stretch = "" if t_from is None and t_to is None else f"-{t_from or 0:g}s-{t_to or 'end'}"
    return (charts.build(con, kind, capture_id, flow_id, direction, t_from, t_to),
            f"{kind}-c{capture_id}-f{flow_id}{stretch}".replace("ends", "end"))


def save(chart, stem):
    """Write STEM.html and STEM.png; their paths."""
    from .charts import save as write
    return write(chart, stem)
