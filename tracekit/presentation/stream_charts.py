"""The streams of one connection on a time line (issue #27): per stream, its
bytes leaving the sender, arriving, held complete behind another stream's
hole (head-of-line time) and the client's read. Time in ms from the
connection's first event in the `streams` table."""

from ..core.errors import TracekitError
from ..core.spans import STREAM_COLORS
from .charts import _alt

PHASE_COLORS = {"sending": "#f58518", "arriving": "#4c78a8",
                "hol_blocking": STREAM_COLORS["hol_blocking"]}


def streams_timeline(con, connection=None):
    """(chart, the connection drawn)."""
    alt = _alt()
    names = [r[0] for r in con.execute("SELECT DISTINCT connection FROM streams ORDER BY 1").fetchall()]
    if not names:
        raise TracekitError("no streams in the store (qlogs, stream events or tracekit h2-events)")
    if connection is None and len(names) != 1:
        raise TracekitError(f"the store holds {len(names)} connections; choose one with --stream "
                            f"(e.g. {names[0]})")
    connection = connection or names[0]
    if connection not in names:
        raise TracekitError(f"no connection {connection!r}; known: {', '.join(names[:10])}")
    rows = con.execute("""
        WITH s AS (SELECT *, min(least(ready_ns, first_sent_ns, first_arrived_ns)) OVER () AS t0
                   FROM streams WHERE connection = ?)
        SELECT direction || ' ' || stream_id AS stream, phase, (lo - t0) / 1e6 AS start_ms,
               (hi - t0) / 1e6 AS end_ms, (read_ns - t0) / 1e6 AS read_ms
        FROM s, (VALUES ('sending', first_sent_ns, last_sent_ns),
                        ('arriving', first_arrived_ns, complete_ns),
                        ('hol_blocking', complete_ns, deliverable_ns)) AS p(phase, lo, hi)
        WHERE lo IS NOT NULL AND hi IS NOT NULL AND hi >= lo
          AND NOT (phase = 'hol_blocking' AND hi = lo)""", [connection]).df()
    scale = alt.Scale(domain=list(PHASE_COLORS), range=list(PHASE_COLORS.values()))
    y = alt.Y("stream:N", title=None)
    bars = alt.Chart(rows).mark_bar(height=10, opacity=0.8).encode(
        x=alt.X("start_ms:Q", title="ms since the connection's first event"), x2="end_ms:Q", y=y,
        color=alt.Color("phase:N", scale=scale, title=None),
        yOffset=alt.YOffset("phase:N", sort=list(PHASE_COLORS)),
        tooltip=["stream", "phase", "start_ms", "end_ms"])
    reads = alt.Chart(rows.dropna(subset=["read_ms"]).drop_duplicates("stream")).mark_tick(
        color="black", thickness=2, size=30).encode(x="read_ms:Q", y=y, tooltip=["stream", "read_ms"])
    return alt.layer(bars, reads).properties(
        width=900, height=60 * max(1, rows["stream"].nunique()),
        title=f"Streams of {connection}: sent, arrived, held behind another stream's hole; tick: read"
    ), connection
