"""The group of requests a calibration reads: which requests match a
`where`, the labels they share, their flows' handshakes -- and the store's
other runs on the same path, where the group alone holds too few
handshakes to read the round trip's spread from.

A persistent connection has one handshake, so a group of persistent runs
holds a few (set 26: four), fewer than `pathrate.MIN_HANDSHAKES`: its
spread read as none, its replay's draws all alike, and a late loss that
lands in one response or the next by the path's jitter landed always in
the same (docs/whatif.md, twenty-fifth round). The spread is the path's,
not the connection's: the store's runs that share the group's labels on
everything but the endpoint's factors (connection, warm-up, congestion
control, initial window, server time, pacing) -- the fresh twin of a
persistent group, in a lab's grid -- are the same path where their run's
smallest handshake is the group's: within `SAME_RTT` of it, or within the
range of the group's own handshakes where that is wider (a run at another
round trip, in a store whose labels do not say so, is another path).
"""

import pandas as pd

from .factors import LABEL_NAMES, LEVEL_NAMES

# factors of the endpoints, not the path: runs that differ only in these share it
ENDPOINT = ("connection", "warmup", "congestion", "initcwnd", "processing_ms", "pacing",
            "slow_start_after_idle", "rcv_window")
# a run whose smallest handshake RTT is further than this share off the group's (or
# than the group's own handshakes' range, where wider) is another path
SAME_RTT = 0.02


def _where_sql(where):
    """(SQL condition on `a`, request_attributes, and params) for {name: value}:
    a request's labels, else its events' fields, else its columns (as
    `tracekit ablation` reads them); numbers match as numbers (loss_down=0
    matches the label 0.0), and a factor's level matches under any name its
    label may have (factors.LABEL_NAMES: rate_mbps=10 as the lab's
    bottleneck_mbps or a user's rate_mbps), and a level under any value an
    attribute may say it with (factors.LEVEL_NAMES: connection=persistent
    as a request's column `reused`)."""
    parts, params = [], []
    for k, v in (where or {}).items():
        pairs = [(name, level) for name in LABEL_NAMES.get(k, (k,))
                 for level in LEVEL_NAMES.get((k, str(v)), (str(v),))]
        parts.append("(" + " OR ".join(["a.attrs[?] = ? OR TRY_CAST(a.attrs[?] AS DOUBLE) = "
                                        "TRY_CAST(? AS DOUBLE)"] * len(pairs)) + ")")
        for name, level in pairs:
            params += [name, level, name, level]
    return (" AND ".join(parts) or "TRUE"), params


def load_requests(con, where):
    """The group's requests with their flows, labels and attributes (a pandas
    frame: `where` names attributes, request_attributes.sql); a
    request seen from both ends counts once, as the client saw it (a request
    an event log names, by its run and id; one found in a capture alone has
    neither and counts as itself). Without a run label a request's run is its
    capture (or its log): the requests of a connection are replayed in order.
    A request the capture's end may have cut (requests.cut_by_capture_end) is
    not a measurement: it is left out, its key in `df.attrs["cut"]`."""
    cond, params = _where_sql(where)
    df = con.execute(f"""
        SELECT r.request_key, coalesce(r.run, 'capture ' || r.capture_id, 'log ' || r.log_id) AS run,
               r.request, r.capture_id, r.flow_id, r.connection,
               r.start_ns, r.request_first_byte_ns, r.request_last_byte_ns,
               r.response_first_byte_ns, r.response_last_byte_ns, r.end_ns, r.duration_ns,
               r.bytes_down, r.labels, a.attrs AS attributes, r.vantage,
               r.cut_by_capture_end AS cut, f.syn_ts_ns,
               CASE WHEN f.syn_count = 1 AND f.synack_count = 1 THEN f.handshake_rtt_ns END
                   AS handshake_rtt_ns
        FROM requests r JOIN request_attributes a USING (request_key)
            LEFT JOIN flows f USING (capture_id, flow_id)
        WHERE r.duration_ns > 0 AND r.bytes_down > 0 AND {cond}
        QUALIFY row_number() OVER (PARTITION BY r.run, coalesce(r.request, r.request_key)
                                   ORDER BY (r.vantage = 'client') DESC NULLS LAST) = 1
        ORDER BY r.run, r.start_ns""", params).df()
    cut = df.cut.fillna(False).astype(bool)
    kept = df[~cut].drop(columns="cut").reset_index(drop=True)
    kept.attrs["cut"] = list(df.request_key[cut])
    return kept




def common_labels(df):
    """Labels every request of the group carries with one value."""
    out = None
    for lab in df.labels:
        d = dict(lab) if lab is not None else {}
        out = d if out is None else {k: v for k, v in out.items() if d.get(k) == v}
    return out or {}




def handshakes(df):
    """Each flow's handshake RTT (ns), once a flow: a persistent connection's
    requests share one handshake, which must not weigh as many."""
    hs = df.drop_duplicates(["capture_id", "flow_id"]).handshake_rtt_ns.dropna()
    return hs[hs > 0]


def path_handshakes(con, df, labels, enough):
    """(handshake RTTs (ns) of the group's path, where they come from or None):
    the group's own (of `df`'s flows) where it has `enough`; else theirs with
    those of the store's runs on the same path (module docstring; `labels`
    the group's common labels), if those make `enough`; else the group's own."""
    own = handshakes(df)
    if len(own) >= enough or not len(own):
        return own, None
    where = {k: v for k, v in labels.items() if k not in ENDPOINT}
    if not where:  # (nothing says which runs share the path)
        return own, None
    ours = set(zip(df.capture_id, df.flow_id))
    path = load_requests(con, where)
    path = path[[k not in ours for k in zip(path.capture_id, path.flow_id)]]
    base = float(own.min())
    near = max(SAME_RTT * base, float(own.max()) - base)
    theirs = pd.concat([hs for _, run in path.groupby("run") if len(hs := handshakes(run))
                        and abs(float(hs.min()) - base) <= near] or [own[:0]])
    if len(own) + len(theirs) < enough:
        return own, None
    said = ", ".join(f"{k}={v}" for k, v in sorted(where.items()))
    return (pd.concat([own, theirs], ignore_index=True),
            f"the store's runs on the group's path ({said}; {len(own)} of the flows the group's)")
