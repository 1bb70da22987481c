"""How the replay's sender (whatif/tcp.py) paces: the rate (Linux's own for a
loss-based sender under fq, BBR's gain x bandwidth) and how many segments
leave as one unit at that rate (Linux's TSO autosizing)."""

from .bbr import PROBE_GAINS, STARTUP_GAIN, bbr_bw


def pacing_rate(tr):
    """The sender's pacing rate, bytes/s (0: not paced). Sets BBR's `pace_rate`."""
    c = tr.c
    if c.cc != "bbr":  # Linux's own: 200 % of cwnd/srtt in slow start, 120 % after
        if not c.pacing:
            return 0.0
        ratio = 2.0 if c.cwnd < c.ssthresh / 2 else 1.2
        return ratio * max(c.cwnd, tr.pipe) * tr.wire / c.srtt if c.srtt else 0.0
    initial = STARTUP_GAIN * c.initcwnd * tr.wire / max(c.srtt or tr.p.rtt, 1e-4)
    gain = {"startup": STARTUP_GAIN, "drain": 1 / STARTUP_GAIN}.get(
        c.bbr_mode, PROBE_GAINS[c.cycle % len(PROBE_GAINS)])
    if c.lt.get("use") and c.bbr_mode == "probe":
        gain = 1.0
    rate = gain * bbr_bw(c)
    if c.bbr_mode == "startup":  # never lowered before the pipe is full
        rate = max(rate, c.pace_rate or initial)
    c.pace_rate = rate
    return rate


def tso_unit(tr):
    """Segments a paced sender puts in one skb (tcp_tso_autosize): about 1 ms at
    the pacing rate (sk_pacing_shift 10), at least 2 (BBR: 1 below 1.2 Mbit/s)."""
    c = tr.c
    if not (c.cc == "bbr" or c.pacing):
        return 1
    rate = pacing_rate(tr)
    least = 1 if c.cc == "bbr" and rate < 150_000 else 2
    return min(max(int(rate / 1024 / tr.mss), least), 65536 // tr.mss)
