"""The path's random loss as a two-state chain (Gilbert-Elliott), for the
replay (whatif/tcp.py) and the calibration (whatif/losses.py).

A packet is lost only in the bad state, there with probability `bad_loss`;
the chain moves before each packet: into the bad state with `enter`, and
stays in it with `stay`. Three numbers a trace gives fix it: `loss`, the
share of packets lost; `burst`, P(lost | the packet before was lost); and
`bad_loss`. With `bad_loss` 1 every packet in the bad state is lost, so
`stay` is `burst` (Gilbert's chain, the replay's before the twenty-first
round); below 1 a burst skips packets -- a channel that loses every other
packet for a while (set 19's delay line: 0.6 in its bad state) -- which the
kernel recovers as one episode, where Gilbert's chain of the same share and
`burst` makes more, shorter episodes. Independent loss is `burst` 0.

The calibration reads `bad_loss` from the random losses' second neighbours:
P(lost | lost one before) is stay x bad_loss, P(lost | lost two before)
(stay^2 + (1 - stay) x enter) x bad_loss (`second`), and with the share
that fixes the three (`bad_loss_of`)."""


def rates(loss, burst, bad_loss=1.0):
    """(enter, stay, bad_loss) of the chain keeping `loss` as the share lost
    and `burst` as P(lost | previous lost); Gilbert's (bad_loss 1) where the
    rest cannot hold it."""
    if not (burst > 0 and 0 < loss < 1):
        return loss, burst, 1.0
    if bad_loss >= 1.0 or loss >= bad_loss or burst >= bad_loss:
        # lost -> lost `burst` and delivered -> lost q lose q / (1 - burst + q)
        return loss * (1.0 - burst) / (1.0 - loss), burst, 1.0
    stay, bad = burst / bad_loss, loss / bad_loss  # (the stationary share in it)
    return bad * (1.0 - stay) / (1.0 - bad), stay, bad_loss


def draw(path, rng, bad):
    """(lost, in the bad state after this packet) for the next packet."""
    if path.bad_loss >= 1.0:  # Gilbert's: the state is whether the last was lost
        q = path.stay if (bad and path.stay > 0) else path.enter
        lost = q > 0 and rng.random() < q
        return lost, lost
    bad = rng.random() < (path.stay if bad else path.enter)
    return bad and rng.random() < path.bad_loss, bad


def second(loss, burst, bad_loss):
    """P(lost | lost two packets before) of the chain: two steps in the bad
    state, or out and back in, then lost there."""
    enter, stay, bad_loss = rates(loss, burst, bad_loss)
    return (stay * stay + (1.0 - stay) * enter) * bad_loss


def bad_loss_of(loss, burst, seen):
    """`bad_loss` of the chain whose P(lost | lost two before) is `seen`
    (with `loss` and `burst` as read): 1 where Gilbert's chain makes as
    many second neighbours or more (the least a chain with that share and
    `burst` makes); else the share that makes `seen`, found by bisection
    (the fewer of a bad state's packets lost, the longer it lasts and the
    more second neighbours), its stay at most STAY_MAX."""
    if not (burst > 0 and 0 < loss < 1) or seen <= second(loss, burst, 1.0):
        return 1.0
    lo, hi = max(burst / STAY_MAX, loss * 1.01), 1.0
    if lo >= hi:
        return 1.0
    if seen >= second(loss, burst, lo):
        return lo
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if second(loss, burst, mid) > seen else (lo, mid)
    return (lo + hi) / 2


STAY_MAX = 0.95  # a bad state left after 20 packets on average, at the longest
