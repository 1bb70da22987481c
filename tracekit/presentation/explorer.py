"""The report's linked request explorer: one Vega-Lite chart of three views
that follow one picked request.

- the requests in start order, one bar each (its measured time): click one;
- the picked request's spans as a timeline (tracekit attribution, as
  `plot waterfall` draws them), one after another from its start;
- the picked request's packets: its flow's frames between its start and its
  end, each at its time since the request started and the payload bytes its
  direction had carried by then, with its frame number.

What is picked is one Vega signal, `picked` (a top-level parameter): the
page's script (templates/page.html.j2) sets it from a click on a request's
bar or on its row in the requests table, and the other two views filter on
it. The page stays inert data plus that script: nothing is fetched.

Size: every request shown in the table has its spans and packets in the page,
so the packets are thinned to a budget (PACKET_BUDGET rows in all, at least
MIN_PER_REQUEST a request): a request over its share keeps every k-th packet
and its last, and its tooltip says 1 in k.
"""

from ..core.errors import TracekitError
from .ablation_charts import SPAN_COLORS

PACKET_BUDGET = 8_000
MIN_PER_REQUEST = 60
WIDTH = 760


def _requests(con, keys):
    return con.execute("""
        SELECT r.request_key AS request, coalesce(r.labels['run'], r.run) AS run,
               r.capture_id AS capture, r.flow_id AS flow,
               round(r.duration_ns / 1e6, 3) AS measured_ms,
               list_position($keys, r.request_key) AS idx
        FROM requests r WHERE list_contains($keys, r.request_key) ORDER BY idx""",
                       {"keys": keys}).df()


def _spans(con, keys):
    df = con.execute("""
        SELECT request_key AS request, span || coalesce(' (' || detail || ')', '') AS label,
               span, ns::DOUBLE / 1e6 AS ms, irreducible,
               row_number() OVER (PARTITION BY request_key ORDER BY span_order,
                   list_transform(regexp_extract_all(coalesce(detail, ''), '[0-9]+'),
                                  lambda d: d::BIGINT), detail) AS step
        FROM attribution WHERE list_contains($keys, request_key) AND ns <> 0
        ORDER BY request, step""", {"keys": keys}).df()
    df["end_ms"] = df.groupby("request")["ms"].cumsum()
    df["start_ms"] = df["end_ms"] - df["ms"]
    return df


def _packets(con, keys, per_request):
    """Each request's packets (its flow, its time), every k-th past `per_request`."""
    return con.execute("""
        WITH mine AS (
            SELECT r.request_key AS request, p.frame, p.capture_id AS capture,
                   (p.ts_ns - r.start_ns) / 1e6 AS t_ms,
                   CASE WHEN p.from_client THEN 'client to server' ELSE 'server to client'
                        END AS direction, coalesce(p.payload_bytes, 0) AS payload,
                   sum(coalesce(p.payload_bytes, 0)) OVER (PARTITION BY r.request_key,
                       p.from_client ORDER BY p.ts_ns, p.frame) AS carried,
                   row_number() OVER (PARTITION BY r.request_key ORDER BY p.ts_ns, p.frame) AS i,
                   count(*) OVER (PARTITION BY r.request_key) AS n
            FROM requests r JOIN packets p ON p.capture_id = r.capture_id
                AND p.flow_id = r.flow_id AND p.ts_ns BETWEEN r.start_ns AND r.end_ns
            WHERE list_contains($keys, r.request_key))
        SELECT request, frame, capture, round(t_ms, 3) AS t_ms, direction, payload, carried,
               greatest(1, ceil(n / $most))::BIGINT AS one_in
        FROM mine WHERE (i - 1) % greatest(1, ceil(n / $most)) = 0 OR i = n
        ORDER BY request, i""", {"keys": keys, "most": per_request}).df()


def request_explorer(con, keys, picked):
    """The explorer's spec (a dict) for requests `keys` (in the table's order),
    `picked` first."""
    if not keys:
        raise TracekitError("no requests to explore")
    per_request = max(MIN_PER_REQUEST, PACKET_BUDGET // len(keys))
    requests, spans, packets = (_requests(con, keys), _spans(con, keys),
                                _packets(con, keys, per_request))
    show = {"filter": "datum.request === picked"}
    # (columns, and a request by its index, found again by lookup: a smaller page)
    index = dict(zip(requests["request"], requests["idx"]))
    spans["request"] = spans["request"].map(index)
    packets["request"] = packets["request"].map(index)
    shares = packets.groupby("request")["one_in"].max()
    requests["one_in"] = requests["idx"].map(shares).fillna(1).astype(int)
    packets["up"] = packets["direction"].eq("client to server").astype(int)
    spans_data, spans_flat = _columns(spans.rename(columns={"request": "idx"}))
    packets_data, packets_flat = _columns(
        packets.drop(columns=["capture", "direction", "one_in"]).rename(columns={"request": "idx"}))
    keyed = {"lookup": "idx", "from": {"data": {"name": "requests"}, "key": "idx",
                                       "fields": ["request", "capture", "one_in"]}}
    direction = {"calculate": "datum.up ? 'client to server' : 'server to client'",
                 "as": "direction"}
    colors = {"domain": list(SPAN_COLORS), "range": list(SPAN_COLORS.values())}
    overview = {
        "data": {"name": "requests"}, "width": WIDTH, "height": 120,
        "title": {"text": "Requests in start order: click one (or its row in the table)",
                  "anchor": "start", "fontSize": 13},
        "mark": {"type": "bar", "cursor": "pointer"},
        "encoding": {
            "x": {"field": "idx", "type": "ordinal", "title": None,
                  "axis": {"labels": False, "ticks": False}},
            "y": {"field": "measured_ms", "type": "quantitative", "title": "measured (ms)"},
            "color": {"condition": {"test": "datum.request === picked", "value": "#d62728"},
                      "value": "#9ab"},
            "tooltip": [{"field": "request"}, {"field": "run"}, {"field": "measured_ms"},
                        {"field": "capture"}, {"field": "flow"}]}}
    timeline = {
        "data": spans_data, "transform": [spans_flat, keyed, show], "width": WIDTH,
        "title": {"text": {"signal": "'Where the time of ' + picked + ' went, in order'"},
                  "subtitle": "solid: irreducible (part of the serial bound); light: the rest",
                  "anchor": "start", "fontSize": 13},
        "mark": "bar",
        "encoding": {
            "y": {"field": "label", "type": "nominal", "title": None,
                  "sort": {"field": "step"}},
            "x": {"field": "start_ms", "type": "quantitative",
                  "title": "time since the request started (ms)"},
            "x2": {"field": "end_ms"},
            "color": {"field": "span", "type": "nominal", "scale": colors, "legend": None},
            "opacity": {"condition": {"test": "datum.irreducible", "value": 1}, "value": 0.55},
            "tooltip": [{"field": "request"}, {"field": "label", "title": "span"},
                        {"field": "ms", "format": ".3f"}, {"field": "irreducible"}]}}
    frames = {
        "data": packets_data, "transform": [packets_flat, keyed, show, direction], "width": WIDTH,
        "height": 220,
        "title": {"text": {"signal": "'The packets of ' + picked + ' (its flow, its time)'"},
                  "anchor": "start", "fontSize": 13},
        "mark": {"type": "point", "filled": True, "size": 24},
        "encoding": {
            "x": {"field": "t_ms", "type": "quantitative",
                  "title": "time since the request started (ms)"},
            "y": {"field": "carried", "type": "quantitative",
                  "title": "payload bytes carried that way"},
            "color": {"field": "direction", "type": "nominal", "title": None,
                      "legend": {"orient": "top-left"}},
            "tooltip": [{"field": "frame", "title": "frame (Wireshark frame.number)"},
                        {"field": "capture"}, {"field": "direction"}, {"field": "t_ms"},
                        {"field": "payload"}, {"field": "carried"},
                        {"field": "one_in", "title": "shown: 1 packet in"}]}}
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "params": [{"name": "picked", "value": picked}],
        "datasets": {"requests": _records(requests)},
        "vconcat": [overview, {"vconcat": [timeline, frames],
                               "resolve": {"scale": {"x": "shared"}}}],
        "usermeta": {"linked": "picked"},
    }


def _columns(df):
    """(data, transform) carrying a frame as one object of columns, flattened back
    into rows in the browser: a row costs its values, not its field names again."""
    import json
    cols = json.loads(df.to_json(orient="columns"))
    values = {c: [cols[c][str(i)] for i in range(len(df))] for c in df.columns}
    return {"values": [values]}, {"flatten": list(df.columns)}


def _records(df):
    """A frame's rows as JSON-ready dicts (numpy scalars and NaN made plain)."""
    import json
    return json.loads(df.to_json(orient="records"))
