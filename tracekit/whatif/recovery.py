"""Proportional rate reduction (RFC 6937) as Linux's tcp_cwnd_reduction does
it, for a loss-based sender (CUBIC, Reno) in fast recovery in the replay
(whatif/tcp.py).

On entering recovery the sender notes its window (`prr_prior`) and then,
on each ACK, sets cwnd = pipe + sndcnt: while more is in flight than
ssthresh, a share ssthresh / prior of what has been delivered since;
below it, what is delivered (+1 when the cumulative ACK advances with no
new loss: the slow-start reduction bound), at most up to ssthresh. A burst
whose tail the queue dropped is thus recovered 1, 2, 4, ... segments a
round -- as the lab's kernel does it (docs/whatif.md) -- not all at once.
"""


def prr(tr, newly, lost, advanced):
    """One ACK of transfer `tr` in recovery: `newly` segments delivered,
    `lost` newly marked lost, `advanced` if the cumulative ACK moved."""
    c = tr.c
    tr.prr_delivered += newly
    delta = int(c.ssthresh) - tr.pipe
    if delta < 0:
        prior = max(int(tr.prr_prior), 1)
        snd = (int(c.ssthresh) * tr.prr_delivered + prior - 1) // prior - tr.prr_out
    else:
        snd = max(tr.prr_delivered - tr.prr_out, newly) + (advanced and not lost)
        snd = min(delta, snd)
    c.cwnd = float(tr.pipe + max(snd, 0 if tr.prr_out else 1))
