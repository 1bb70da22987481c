"""What a prediction rests on where the trace could not tell: the queue that
never filled. The calibration's guess (calibrate.QUEUE_GUESS) is the larger
of the longest train at the bottleneck's spacing and the longest wait in the
queue times the rate, at least 0.4 BDP; the savings replayed at other
queues are what --explain shows and the intervals reach (engine._widened)."""

import numpy as np

from .calibrate import QUEUE_GUESS, queue_guess
from .replayer import DRAWS, SEED, replay, setting


def queue_sensitivity(r, draws=DRAWS, seed=SEED):
    """[(queue_bytes, saving s)] at half and at twice the queue when the
    calibration guessed it (no label, no overflow seen) and the change does
    not set it, else []: how much the prediction rests on the guess (a warm
    burst overflows a small queue and not a large one). And at the guess
    the waits alone give (`waited_queue`), where it is under half the guess
    and the group's own replay did not refute the guess: the guess is the
    longest train, which an ACK-clocked sender makes far longer than its
    queue (370 kB on the delay line's 60 kB), the waits a lower bound
    (53 kB there); the trace cannot say where between them the queue is
    (docs/whatif.md, eighteenth round)."""
    cal = r.calibration
    if "queue_bytes" in r.target or QUEUE_GUESS not in cal.sources.get("queue_bytes", ""):
        return []
    out = []
    queues = [cal.queue_bytes / 2, cal.queue_bytes * 2]
    waited = waited_queue(cal)
    if waited is not None and waited < cal.queue_bytes / 2 and \
            "queue_guess_bytes" not in cal.estimates:
        queues.insert(0, waited)
    for q in queues:
        a = replay(cal, setting(cal, {"queue_bytes": q}), draws, seed)
        b = replay(cal, setting(cal, {**r.target, "queue_bytes": q}), draws, seed)
        out.append((q, float(np.median(a) - np.median(b))))
    return out


def waited_queue(cal):
    """The queue (bytes) the guess's rule gives without the trains: the
    longest wait at the bottleneck times the rate (a queue that held it is
    at least that deep), at least 0.4 BDP; None where no wait was read (the
    0.4 BDP alone is no reading of the trace)."""
    if "queue_held_ms" not in cal.estimates:
        return None
    return queue_guess(cal.estimates["queue_held_ms"] / 1e3 * cal.rate_Bps, cal.rate_Bps, cal.rtt_s)
