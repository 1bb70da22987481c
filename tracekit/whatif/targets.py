"""What the store's runs at the target say about the change itself, where
the store holds some: the workload a persistent target replays, and the
structure of a loss the measured group did not have.

The prediction's times come from the measured group alone; these readings
take from the target's runs only what the change is -- how many responses
warmed its connections, and whether its loss comes in bursts -- or what the
path is where the measured group could not say (how deep its queue is),
never their times."""

from dataclasses import replace as _replace

import numpy as np

from .calibrate import QUEUE_GUESS, first_warmups, loss_of
from .replayer import Derived, setting


def workload(con, target, tgt):
    """(target, where its workload comes from). A persistent connection's
    first request either opens it (handshake and slow start in its time) or
    follows warm-up responses (the lab's runs: `warmup`, 1). Unless stated,
    the runs the store holds at the target say which (most of them):
    the prediction replays the workload its measurement had. Without them,
    the factor's default (1)."""
    if target.get("connection") != "persistent" or "warmup" in target:
        return target, None
    if tgt is None or not len(tgt):
        return target, "warmup 1: the factor's default (no runs at the target)"
    firsts = first_warmups(con, tgt)
    w = max(sorted(set(firsts)), key=firsts.count)  # the most common; ties: the fewest
    k = firsts.count(w)
    said = ("their first request opens the connection" if w == 0
            else f"{w} warm-up response(s) before their first request")
    return ({**target, "warmup": Derived(w)},
            f"warmup {w}: {k} of the target's {len(firsts)} runs ({said})")


def loss_shape(con, target, tgt, cal):
    """(target, where its loss's burstiness comes from). `loss_down` states a
    share, not how the losses fall: a channel that loses in bursts costs a
    sender fewer recoveries than independent loss of the same share (sets
    18-21, docs/whatif.md). Where the measured group read a burstiness its
    own, its losses' (the same path at another level); where it read none
    (no loss, too few) and the store holds runs at the target, theirs -- the
    same reading of the retransmissions the calibration makes; else
    independent."""
    level = target.get("loss_down")
    if not level or cal.burst > 0:
        return target, None
    if tgt is None or not len(tgt):
        return target, "independent: no burstiness measured, no runs at the target"
    est = {}
    _, burst, bad_loss, _, _ = loss_of(con, tgt, cal.rate_Bps, {}, est)
    if not burst:
        return target, (f"independent: the target's runs read none (P(lost | previous lost) "
                        f"{est.get('burst', 0.0):.3f})")
    return ({**target, "loss_burst": burst, "bad_loss": bad_loss},
            f"from the target's runs: P(lost | previous lost) {burst:.3f}, a burst loses "
            f"{bad_loss:.2f} (whatif/chain.py)")


def queue_depth(con, target, tgt, cal):
    """(calibration, where its queue comes from, or None: unchanged). A group
    that never filled the queue can only guess how deep it is (QUEUE_GUESS:
    the longest train, which an ACK-clocked sender makes longer than the
    queue); a change that lets the window grow (a persistent connection)
    turns on it. Where the store's runs at the target filled the same path's
    queue -- losses at a full queue, whatif/queueing.py -- the longest wait
    they had there x the rate (the target's, where the change sets one) is
    a reading, not a guess: the calibration takes it for both levels (the
    path is the same), never below the longest wait the group itself held.
    A change that states the queue, or a group that read it, keeps its own."""
    if "queue_bytes" in target or cal.sources.get("queue_bytes") != QUEUE_GUESS:
        return cal, None
    if tgt is None or not len(tgt):
        return cal, None
    rate = setting(cal, target).rate  # (the target's: a change of rate drains it at that)
    *_, waits = loss_of(con, tgt, rate, {}, {})
    if not waits:
        return cal, None
    wait = float(np.median(waits))
    held = cal.estimates.get("queue_held_ms", 0.0) / 1e3 * cal.rate_Bps
    queue = max(wait * rate, held)
    said = (f"the store's runs at the target: the longest wait at the bottleneck "
            f"({wait * 1e3:.1f} ms, median of {len(waits)} flows that lost segments at a full "
            f"queue) x the rate" + (f", raised to the group's own longest wait's ({held:.0f})"
                                    if held > wait * rate else "")
            + f"; the group's guess was {cal.queue_bytes:.0f}")
    return (_replace(cal, queue_bytes=queue, sources={**cal.sources, "queue_bytes": said},
                     estimates={**cal.estimates, "queue_guess_bytes": cal.queue_bytes}), said)
