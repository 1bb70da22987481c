"""BBR's long-term ("policer") bandwidth, as Linux's tcp_bbr.c has it
(bbr_lt_bw_sampling), for the replay (whatif/tcp.py).

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

LT_LOSS = 50 / 256      # lost/delivered that marks an interval as policed
LT_MAX_ROUNDS = 48      # ProbeBW rounds the long-term bandwidth is used


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
