"""Put an event log on a capture's clock: combine causality bounds.

analyses/clock_offset.sql gives upper bounds (an event before a packet) and
lower bounds (an event after a packet) on theta, the offset to add to the
log's timestamps. Like NTP's interval intersection, theta lies in
[max lower, min upper]; the estimate is its midpoint and the uncertainty its
half-width. Bounds that cross (max lower > min upper) mean the clocks drift
or a port was matched to the wrong flow: the estimate is still the midpoint,
reported as inconsistent with the size of the crossing.
"""

from dataclasses import dataclass

from ..core.errors import TracekitError
from ..pipeline.runner import run_analysis


@dataclass
class ClockEstimate:
    offset_ns: int
    uncertainty_ns: int | None  # None: one-sided
    lower_ns: int | None
    upper_ns: int | None
    pairs: int
    consistent: bool


def estimate_offset(con, log_id, capture_id):
    _, rows = run_analysis(con, "clock_offset", log_id=log_id, capture_id=capture_id)
    lows = [r[3] for r in rows if r[2] == "lower"]
    highs = [r[3] for r in rows if r[2] == "upper"]
    if not rows:
        (fmt,), = con.execute("SELECT format FROM event_logs WHERE log_id = ?", [log_id]).fetchall()
        if fmt.startswith("queqiao") or fmt == "prometheus":
            raise TracekitError(
                f"no clock pairs between event log {log_id} and capture {capture_id}: Queqiao's "
                f"records name no address or port of the connections they describe (its flow "
                f"records carry session and flow ids only), so no packet can be paired with "
                f"them; give the offset with tracekit ingest --clock-offset")
        raise TracekitError(
            f"no clock pairs between event log {log_id} and capture {capture_id}: the log "
            f"needs connect_start/connect_end/first_byte events with a local_port that is "
            f"a client port of a TCP flow in the capture")
    lo = max(lows) if lows else None
    hi = min(highs) if highs else None
    if lo is None or hi is None:
        bound = lo if hi is None else hi
        return ClockEstimate(bound, None, lo, hi, len(rows), True)
    return ClockEstimate((lo + hi) // 2, abs(hi - lo) // 2, lo, hi, len(rows), lo <= hi)
