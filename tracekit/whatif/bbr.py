"""BBR for the replay (whatif/tcp.py): its round trips and window
(bbr_round, bbr_window), and its long-term ("policer") bandwidth, as Linux's
tcp_bbr.c has it (bbr_lt_bw_sampling).

Two consecutive sampling intervals of 4-16 rounds, each ended by a loss
with lost/delivered >= 50/256 (about 20 %), whose delivery rates agree
within 1/8 (or 4 kbit/s), make BBR take their mean as the bandwidth and
pace at gain 1 for 48 ProbeBW rounds -- across idle periods, so across the
requests of a persistent connection. Sampling starts at a loss and restarts
on an application-limited sample (a response's first flight: the server's
write finds the connection idle); an RTO ends a round and an interval. At
14 % random loss lost/delivered is about 16 % on average and an interval
crosses 20 % often.
"""

STARTUP_GAIN = 2.89
PROBE_GAINS = (1.25, 0.75, 1, 1, 1, 1, 1, 1)
LT_LOSS = 50 / 256      # lost/delivered that marks an interval as policed
LT_MAX_ROUNDS = 48      # ProbeBW rounds the long-term bandwidth is used
AGG_WIN_ROUNDS = 5      # bbr_extra_acked_win_rtts
AGG_MAX_S = 0.1         # bbr_extra_acked_max_us: the aggregation window's cap, in time at bw


def bbr_bw(c):
    """BBR's bandwidth: the long-term estimate while it is in use, else the windowed max."""
    return c.lt["bw"] if c.lt.get("use") else c.btlbw


def lt_sampling(tr, round_start, app_limited):
    """Per ACK of transfer `tr` (and per RTO): `round_start` if the ACK
    started a round, `app_limited` if the segment it delivered was sent
    application-limited."""
    c, lt = tr.c, tr.c.lt
    if lt.get("use"):
        if c.bbr_mode == "probe" and round_start:
            lt["rounds"] += 1
            if lt["rounds"] >= LT_MAX_ROUNDS:
                lt.clear()
                c.cycle = 0
        return
    if not lt.get("sampling"):
        if not tr.rs_losses:
            return
        _lt_interval(tr)
    if app_limited:
        lt.clear()
        return
    lt["rounds"] += round_start
    if lt["rounds"] > 16:
        lt.clear()
    if not 4 <= lt.get("rounds", 0) <= 16 or not tr.rs_losses:
        return
    lost, delivered = c.tot_lost - lt["lost"], c.tot_delivered - lt["delivered"]
    if lost < LT_LOSS * delivered or tr.now - lt["t"] < 1e-3:
        return
    bw = delivered * tr.wire / (tr.now - lt["t"])
    old = lt.get("bw", 0.0)
    if old and (abs(bw - old) <= old / 8 or abs(bw - old) <= 500):
        lt.update(bw=(bw + old) / 2, use=True, rounds=0)
        return
    lt["bw"] = bw
    _lt_interval(tr)


def _lt_interval(tr):
    """A sampling interval starts now."""
    c = tr.c
    c.lt.update(sampling=True, rounds=0, t=tr.now, lost=c.tot_lost,
                delivered=c.tot_delivered)


def bbr_round(tr, app_limited):
    """A round trip ended (transfer `tr`): the bandwidth filter's window of 10
    rounds, Startup's exit (the bandwidth not grown by 25 % in 3 rounds), ProbeBW's cycle.

    `app_limited`: the sample that ended the round is from a segment sent
    before the response's first delivery. Linux marks a connection
    application-limited only when the application writes with nothing
    unsent (tcp_rate_check_app_limited, from tcp_sendmsg), until what was
    in flight then is delivered; a response written at once is limited for
    its first flight only, and the rounds that recover its lossy tail after
    all of it was sent do count towards leaving Startup. (The replay had
    taken every round begun after the last new segment as limited, so a
    lossy warm-up never counted them: tcp.APP_LIMITED_AT_WRITE.)"""
    c = tr.c
    c.bw_samples = {r: v for r, v in c.bw_samples.items() if r > c.rounds - 10}
    c.btlbw = max(c.bw_samples.values(), default=c.btlbw)
    if c.bbr_mode == "startup" and not app_limited:
        if c.btlbw >= 1.25 * c.full_bw:
            c.full_bw, c.full_bw_rounds = c.btlbw, 0
        else:
            c.full_bw_rounds += 1
            if c.full_bw_rounds >= 3:
                c.bbr_mode = "drain"
    elif c.bbr_mode == "probe":
        c.cycle += 1


def ack_aggregation(tr, acked, round_start):
    """bbr_update_ack_aggregation: how far the segments ACKed since an epoch
    began run ahead of what the bandwidth would deliver in that time (ACKs
    that come compressed, delayed or in bursts), the largest such excess over
    two windows of 5 rounds, capped at the window; BBR adds it to its window
    once it has left Startup (bbr_ack_aggregation_cwnd), at most 100 ms at
    the bandwidth."""
    c, a = tr.c, tr.c.agg
    if not a:
        a.update(extra=[0.0, 0.0], idx=0, rounds=0, t=tr.now, acked=0.0)
    if round_start:
        a["rounds"] += 1
        if a["rounds"] >= AGG_WIN_ROUNDS:
            a["rounds"], a["idx"] = 0, 1 - a["idx"]
            a["extra"][a["idx"]] = 0.0
    expected = bbr_bw(c) * (tr.now - a["t"]) / tr.wire
    if a["acked"] <= expected:  # (or 2^20 segments since the epoch began)
        a["acked"], a["t"], expected = 0.0, tr.now, 0.0
    a["acked"] += acked
    extra = min(a["acked"] - expected, c.cwnd)
    a["extra"][a["idx"]] = max(a["extra"][a["idx"]], extra)


def bbr_window(tr, acked):
    """BBR's window on an ACK of `acked` segments: packet conservation for the
    first round of recovery, else growing by what is acked towards gain x BDP."""
    c = tr.c
    if tr.in_recovery and c.rounds == tr.conserve_round:
        c.cwnd = max(c.cwnd, tr.pipe + acked)
        return
    if bbr_bw(c) <= 0:
        c.cwnd += acked
        return
    bdp = bbr_bw(c) * min(c.min_rtt, 10.0) / tr.wire
    if c.bbr_mode == "drain" and tr.pipe <= bdp:
        c.bbr_mode = "probe"
    gain = STARTUP_GAIN if c.bbr_mode == "startup" else 2.0
    target = gain * bdp + 3
    if c.bbr_mode != "startup" and c.agg:  # bbr_ack_aggregation_cwnd
        target += min(max(c.agg["extra"]), bbr_bw(c) * AGG_MAX_S / tr.wire)
    if c.bbr_mode != "startup":
        c.cwnd = min(c.cwnd + acked, target)
    elif c.cwnd < target or tr.delivered < c.initcwnd:
        c.cwnd += acked
    c.cwnd = max(c.cwnd, 4.0)
