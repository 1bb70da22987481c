"""What-if: a group's calibration (whatif/calibrate.py) with the readings
its own replay decides (the loss as random or the queue's, the sender, a
guessed queue), its requests replayed as they were and under a change
(whatif/replayer.py), and the prediction.

The prediction is differential: the saving is replay(source) - replay(target)
(what ablation calls predicted(A) - predicted(B)), and the predicted median
at the target is the measured median less it, so what the replay gets wrong
about the source and the target alike (the client's own overheads, a
constant the replay leaves out) cancels. The replay of the source beside
its measured median says how well the calibration holds. Intervals are the
2.5-97.5 % percentiles of the statistic over resamples of as many requests
as were measured, drawn from the replayed distribution: what a repeat of the
experiment would show, bimodal outcomes included (a request that pays an
RTO or does not); the predicted median's interval is the measured median's
(resampled) less the replayed saving's, and neither it nor the predicted
median goes below the fastest replayed request at the target (a group of a
dozen lossy requests less a large saving could otherwise print a negative
time).
"""

from dataclasses import dataclass, field, replace as _replace

import numpy as np

from ..core.errors import TracekitError
from . import targets
from .calibrate import QUEUE_GUESS, calibrate, load_requests, measured_connection, queue_guess
from .factors import as_labels, describe
from .guesses import queue_sensitivity
from .replayer import DRAWS, SEED, delivered, replay, setting

RESAMPLES = 2000
TOLERANCE = (0.10, 0.010)  # within max(10 %, 10 ms)
MISFIT_BY_REQUEST = False  # _misfit: request by request (off: the times by rank)
MISFIT = 0.03  # a burst read as CUBIC whose replay misses its group by more: Reno, no HyStart tried
REFUTED = 1.5  # a reading whose replay of the measured group takes this times its median


@dataclass
class WhatIf:
    where: dict
    source: dict
    target: dict
    calibration: object
    measured_source: np.ndarray       # s, per request
    replay_source: np.ndarray         # s, (requests, draws)
    replay_target: np.ndarray
    measured_target: np.ndarray | None = None
    intervals: dict = field(default_factory=dict)
    # The chance that even the true saving is within the tolerance of a measured
    # saving like this one: the share of the measured saving's resamples (each
    # measured group's requests drawn again) within the tolerance of the measured
    # value. A dozen lossy requests a group can leave it far below 1; summed over
    # cells, what a perfect prediction would score. None without a measured target.
    chance: float | None = None
    workload: str | None = None  # where the target's warm-up count came from (targets.py)
    loss_shape: str | None = None  # where the target loss's burstiness came from (targets.py)
    # [(queue_bytes, saving s)] at half and twice a guessed queue, and at the longest
    # wait's where the guess is over twice it (guesses.queue_sensitivity),
    # [(sender, misfit, saving s)] of the other senders the group's times fit as well
    # (sender_savings): the intervals "saving" and "predicted" take them in
    queue_savings: list = field(default_factory=list)
    sender_savings: list = field(default_factory=list)

    @property
    def saving(self):
        """Predicted saving (s): replay(source) - replay(target), medians."""
        return float(np.median(self.replay_source) - np.median(self.replay_target))

    @property
    def floor(self):
        """The fastest replayed request at the target: no median of them can
        be lower (the measured median less a large saving can)."""
        return float(np.min(self.replay_target))

    @property
    def predicted(self):
        return max(float(np.median(self.measured_source)) - self.saving, self.floor)

    @property
    def measured_saving(self):
        if self.measured_target is None or not len(self.measured_target):
            return None
        return float(np.median(self.measured_source) - np.median(self.measured_target))

    @property
    def within(self):
        m = self.measured_saving
        if m is None:
            return None
        return bool(_close(self.saving, m))

    @property
    def covered(self):
        """The measured saving inside the predicted saving's 95 % interval (the
        replay's own of a repeat of the experiment, widened by what the runs
        could not tell: _widened; None without a measured target): how honest
        the interval is, cell by cell."""
        m, iv = self.measured_saving, self.intervals.get("saving")
        if m is None or iv is None:
            return None
        return iv[0] <= m <= iv[1]


def _close(predicted, measured):
    """Within max(10 %, 10 ms) of the measured saving (predicted: a value or an array)."""
    return np.abs(predicted - measured) <= max(TOLERANCE[0] * abs(measured), TOLERANCE[1])


def _resampled(values, n, rng):
    v = np.asarray(values, dtype=float).ravel()
    return np.median(v[rng.integers(0, len(v), (RESAMPLES, n))], axis=1)


def _interval(x):
    return float(np.percentile(x, 2.5)), float(np.percentile(x, 97.5))


def whatif(con, where, source, target, draws=DRAWS, seed=SEED, assume=None):
    """Predict the requests matching where + source under target ({factor: value})."""
    cal, measured, replayed = calibrated(con, {**(where or {}), **as_labels(source)},
                                         draws, seed, assume,
                                         check=lambda cal: _warmup_refused(cal, target))
    known = _labelled(con)
    stated = {k: v for k, v in target.items() if k in known}
    tgt = (load_requests(con, {**(where or {}), **as_labels({**source, **stated})})
           if stated else None)
    target, workload = targets.workload(con, target, tgt)
    target, loss_shape = targets.loss_shape(con, target, tgt, cal)
    cal, queue = targets.queue_depth(con, target, tgt, cal)
    if queue is not None:  # (the path's queue read at the target: the group replayed with it)
        replayed = replay(cal, setting(cal, {}), draws, seed)
    group, at = describe({**(where or {}), **as_labels(source)}), setting(cal, target)
    r = WhatIf(where or {}, source, target, cal, measured,
               delivered(replayed, setting(cal, {}), group),
               delivered(replay(cal, at, draws, seed), at, group), workload=workload,
               loss_shape=loss_shape)
    if tgt is not None and len(tgt):
        r.measured_target = tgt.duration_ns.to_numpy() / 1e9
    _intervals(r)
    r.queue_savings = queue_sensitivity(r, draws, seed)
    r.sender_savings = sender_savings(cal, measured, r.target, draws, seed)
    _widened(r)
    return r


def _warmup_refused(cal, target):
    """A warm-up stated where the connections are fresh: refused before the
    readings' replays, not after."""
    if "warmup" in target and (target.get("connection") or measured_connection(
            cal.requests, "state a warm-up for each")[0]) == "fresh":
        raise TracekitError("warmup is the requests before the first on a persistent "
                            "connection; this group's are fresh: --set "
                            "connection=persistent,warmup=N")


def sender_savings(cal, measured, target, draws=DRAWS, seed=SEED):
    """[(sender, misfit, saving s)]: where the sender was read from a burst (no
    label, no tcp_info) or not read at all, the other senders -- CUBIC with and
    without HyStart, Reno, BBR -- whose replay of the group fits its times
    within MISFIT too (by rank), and the saving each predicts. A fresh
    group's slow starts often fit all of them (docs/whatif.md, fifteenth
    round): the trace cannot say which, and a change that lets the window
    grow (a persistent connection) turns on it."""
    guessed = cal.sources.get("congestion", "").startswith("no evidence")
    if (cal.sources.get("congestion_read") != "burst" and not guessed) or "congestion" in target:
        return []
    out = []
    for name, cc, hystart in (("cubic", "cubic", True), ("cubic without HyStart", "cubic", False),
                              ("reno", "reno", True), ("bbr", "bbr", True)):
        if cc == cal.congestion and (cc != "cubic" or hystart == cal.hystart):
            continue  # (the reading itself)
        other = _replace(cal, congestion=cc, hystart=hystart)
        source = replay(other, setting(other, {}), draws, seed)
        misfit = _misfit(source, measured)
        if misfit <= MISFIT:
            target_times = replay(other, setting(other, target), draws, seed)
            out.append((name, misfit, float(np.median(source) - np.median(target_times))))
    return out


def _widened(r):
    """What the trace could not tell in the intervals: the saving's 95 %
    interval reaches the savings replayed at the other queues of a guessed
    one (guesses.queue_sensitivity) and those of the other senders that fit
    the group as well (the replay's own interval kept as "saving_replay"),
    and the predicted time's with it. The point prediction stays the
    reading's."""
    at = [s for _, s in r.queue_savings] + [s for _, _, s in r.sender_savings]
    if not at:
        return
    lo, hi = r.intervals["saving_replay"] = r.intervals["saving"]
    r.intervals["saving"] = (min(lo, *at), max(hi, *at))
    p_lo, p_hi = r.intervals["predicted"]
    m = float(np.median(r.measured_source))
    # (floored at the reading's fastest replayed request: another queue's or
    # sender's can be faster still, which the interval then does not reach)
    r.intervals["predicted"] = (max(min(p_lo, m - max(at)), r.floor),
                                max(p_hi, m - min(at), r.floor))


def calibrated(con, where, draws=DRAWS, seed=SEED, assume=None, check=None):
    """(calibration, measured times, their replay) of the requests matching
    where (labels): the trace's calibration with the assumed values stated,
    then the readings that replaying the group decides (a burst as BBR's,
    the loss as random or the queue's, a guessed queue raised, the sender as
    CUBIC, Reno or CUBIC without HyStart). check(calibration), if given,
    may refuse the group before those replays."""
    cal = calibrate(con, where, assume)
    for k, v in (assume or {}).items():
        _assume(cal, k, v)
    if check is not None:  # (a refusal that needs the group, before its replays)
        check(cal)
    measured = np.array([q.duration_s for q in cal.requests])
    cal, replayed = _paced_reading(cal, measured, draws, seed)
    cal, replayed = _loss_reading(cal, measured, draws, seed, replayed)
    cal, replayed = _queue_reading(cal, measured, replayed, draws, seed)
    cal, replayed = _congestion_reading(cal, measured, replayed, draws, seed)
    return cal, measured, replayed


def _queue_reading(cal, measured, replayed, draws, seed):
    """(calibration, replay of the measured group). Where the queue never
    filled, its size is a guess, a lower bound; where the group's own replay
    with it is off its times by more than MISFIT by rank and slower by more
    than MISFIT in median, the replay spent time the kernel's transfers did
    not -- on a path whose only unknown left is the queue, overflowing it:
    the trace refutes the guess. The guess is raised (1.5, 2, 3, 4 times) to the
    smallest that replays the group within MISFIT; if none does, it stays
    (fifteenth round: CUBIC at 95 ms from the server's capture, 15 Mbit/s,
    the longest wait read 38 ms, 72 kB, on a 90 kB queue: replayed in 913 ms
    for 518 measured; at 1.5 times, 519)."""
    if cal.sources.get("queue_bytes") != QUEUE_GUESS:  # (not one the loss reading refuted)
        return cal, replayed
    first = _misfit(replayed, measured)
    if first <= MISFIT or np.median(replayed) <= (1 + MISFIT) * np.median(measured):
        return cal, replayed
    for times in (1.5, 2, 3, 4):
        other = _replace(cal, queue_bytes=cal.queue_bytes * times, sources=dict(cal.sources))
        again = replay(other, setting(other, {}), draws, seed)
        second = _misfit(again, measured)
        if second <= MISFIT:
            other.sources["queue_bytes"] = (
                f"{times:g} x the guess ({cal.queue_bytes:.0f}: {QUEUE_GUESS}): with the guess the "
                f"group's own replay overflowed it, {first:.1%} off its times by rank ("
                f"{np.median(replayed) * 1e3:.0f} ms against {np.median(measured) * 1e3:.0f}); "
                f"with this, {second:.1%}")
            other.estimates = {**cal.estimates, "queue_guess_bytes": cal.queue_bytes}
            return other, again
    return cal, replayed


def _paced_reading(cal, measured, draws, seed):
    """(calibration, replay of the measured group). BBR's startup paces at 2.89
    times the bandwidth it has measured, which a bottleneck spaces as it
    spaces a burst: on a short fast path its second flight looks like CUBIC's
    or Reno's. Where the trace's reading was a burst and the group replayed
    as CUBIC misses its times by more than MISFIT, BBR is replayed too, with
    the same path and loss, and kept if it misses by MISFIT at most and by
    less than half as much as CUBIC, CUBIC without HyStart and Reno each
    (a Reno slow start that overshoots a queue fits BBR better than CUBIC
    too: set 11, Reno at 25 ms). Fifteenth round: BBR at 20 ms and 25
    Mbit/s under 0.5 % random loss, its warm group replayed as CUBIC in 430
    ms, measured 189 ms, as BBR in 192 ms; read as CUBIC, the loss was then
    taken for the queue's drops and a 436 kB queue guessed.

    Before the loss reading: a loss-based sender's crawl under random loss
    is no reason to doubt the loss where the sender is the question. Not
    weighed against the loss reading's alternative (the retransmissions as
    the queue's drops, loss 0, the queue a guess): that one sets aside two
    readings of the trace, BBR only the sender the flight could not tell; on
    set 10's capture it fits by 0.6 % with a 436 kB queue that the longest
    wait, 26 ms (82 kB), says never filled."""
    replayed = replay(cal, setting(cal, {}), draws, seed)
    if cal.sources.get("congestion_read") != "burst" or cal.congestion != "cubic":
        return cal, replayed
    first = _misfit(replayed, measured)
    if first <= MISFIT:
        return cal, replayed
    paced = _replace(cal, congestion="bbr", sources=dict(cal.sources))
    again = replay(paced, setting(paced, {}), draws, seed)
    second = _misfit(again, measured)
    if second > MISFIT or second >= first / 2:
        return cal, replayed
    # and against the other bursts: a Reno slow start overshooting a queue
    # under random loss fits BBR better than CUBIC too
    others = [_misfit(replay(c, setting(c, {}), draws, seed), measured)
              for c in (_replace(cal, hystart=False), _replace(cal, congestion="reno"))]
    if second >= min(others) / 2:
        return cal, replayed
    burst = cal.sources["congestion"].replace(" (CUBIC)", "")
    paced.sources["congestion"] = (
        f"bbr: {burst}; the group's times replayed as CUBIC miss by {first:.1%} (by rank; "
        f"{others[0]:.1%} without HyStart), as Reno by {others[1]:.1%}, as BBR by {second:.1%}")
    return paced, again


def _loss_reading(cal, measured, draws, seed, replayed=None):
    """(calibration, replay of the measured group). The retransmissions a trace
    shows are read as random loss unless runs of lost segments show the queue
    overflowing (whatif/losses.py). A sender that fills a small queue on a short
    path loses single segments too, and recovers them in a round trip it hardly
    notices: read as random loss they make the replay crawl. Where the loss was
    read from the trace (no label) and the group's replay takes REFUTED times
    its measured median or more, the same retransmissions are read as the
    queue's own drops: loss 0, the queue the guess (calibrate.queue_guess:
    the longest train or wait seen, at least 0.4 BDP; overflowing flights
    are not flights on a path this short) -- kept if that replays the group
    closer; the calibration says which reading was kept and both replays."""
    if replayed is None:
        replayed = replay(cal, setting(cal, {}), draws, seed)
    m, first = float(np.median(measured)), float(np.median(replayed))
    stated = ("label", "assumed")  # (not the trace's reading: not refuted by it)
    if first < REFUTED * m or any(cal.sources.get(k, "").startswith(stated)
                                  for k in ("loss_down", "queue_bytes")):
        return cal, replayed
    queue = queue_guess(cal.estimates.get("queue_basis_bytes", 0.0), cal.rate_Bps, cal.rtt_s)
    if cal.loss_down <= 0 and queue == cal.queue_bytes:
        return cal, replayed
    other = _replace(cal, loss_down=0.0, burst=0.0, queue_bytes=queue, sources=dict(cal.sources))
    again = replay(other, setting(other, {}), draws, seed)
    second = float(np.median(again))
    if abs(second - m) >= abs(first - m):
        return cal, replayed
    replays = (f"the group replays in {first * 1e3:.0f} ms, measured {m * 1e3:.0f} ms; so in "
               f"{second * 1e3:.0f} ms")
    if cal.loss_down > 0:
        other.sources["loss_down"] = (f"0: the {cal.loss_down:.2%} retransmitted are read as the "
                                      f"queue's drops (read as random loss {replays})")
    if queue != cal.queue_bytes:
        other.sources["queue_bytes"] = (f"{QUEUE_GUESS}; not {cal.queue_bytes:.0f} "
                                        f"({cal.sources['queue_bytes']}), with which {replays}")
    other.estimates = {**cal.estimates, "loss_down_as_random": cal.loss_down,
                       "queue_bytes_as_read": cal.queue_bytes}
    return other, again


def _congestion_reading(cal, measured, replayed, draws, seed):
    """(calibration, replay of the measured group). A sender that bursts is
    CUBIC or Reno, and the packets of one flight do not say which; the
    window a loss leaves (717/1024 of it or half) and its growth after do,
    and those are what the replay plays out. Where the trace's reading was
    a burst (no label, no tcp_info) and the group's replay misses its
    requests by more than MISFIT of their time (_misfit: the times by rank),
    Reno is replayed too, and CUBIC without HyStart (Reno has none, and
    whether HyStart ends a slow start can turn on a few ms of ACK spacing:
    docs/whatif.md, twelfth round): Reno is kept only if it misses by less
    than half as much as either CUBIC, so that a slow start HyStart did not
    end is not taken for Reno, and by no more than MISFIT, so that it is not
    merely less wrong where something else is (a queue guessed, loss misread:
    a CUBIC server's warm group missed by 18 % as CUBIC and 7 % as Reno).
    Failing Reno, CUBIC without HyStart is kept on the same two terms: the
    kernel's HyStart did not end these slow starts. The calibration says the
    three replays."""
    if cal.sources.get("congestion_read") != "burst" or cal.congestion != "cubic":
        return cal, replayed
    first = _misfit(replayed, measured)
    if first <= MISFIT:
        return cal, replayed
    plain = _replace(cal, hystart=False, sources=dict(cal.sources))
    without = replay(plain, setting(plain, {}), draws, seed)
    second = _misfit(without, measured)
    other = _replace(cal, congestion="reno", sources=dict(cal.sources))
    again = replay(other, setting(other, {}), draws, seed)
    third = _misfit(again, measured)
    fits = (f"the group's requests replayed as CUBIC miss by {first:.1%} (the times by rank; "
            f"{second:.1%} without HyStart), as Reno by {third:.1%}")
    burst = cal.sources["congestion"].replace(" (CUBIC)", "")
    if third > MISFIT or third >= min(first, second) / 2:
        if second > MISFIT or second >= first / 2:
            return cal, replayed
        plain.sources["hystart"] = f"off: {fits}"  # a slow start HyStart did not end
        return plain, without
    other.sources["congestion"] = f"reno: {burst}; {fits}"
    return other, again


def _misfit(replayed, measured):
    """How far the replay's times are from the measured ones: the median, over
    the measured times in order, of |q - m| / m, where q is the replay's time
    (all its requests and draws) at the same rank. Times, not requests: on a
    persistent connection which response overflows the queue turns on a few
    segments of window, and a reading that replays the same times in another
    order fits as well (MISFIT_BY_REQUEST: each request against its replay's
    median, as before the fifteenth round)."""
    m = np.sort(np.asarray(measured, dtype=float))
    if MISFIT_BY_REQUEST:
        per = np.median(replayed, axis=1)
        return float(np.median(np.abs(per - measured) / np.maximum(measured, 1e-9)))
    q = np.quantile(np.asarray(replayed, dtype=float).ravel(), (np.arange(len(m)) + 0.5) / len(m))
    return float(np.median(np.abs(q - m) / np.maximum(m, 1e-9)))


def _labelled(con):
    """The names the store's requests have as attributes (request_attributes.sql:
    labels, their events' fields, their columns): a factor --set to a level
    some of them carry has measured runs at the target."""
    keys = {row[0] for row in con.execute(
        "SELECT DISTINCT unnest(map_keys(attrs)) FROM request_attributes").fetchall()}
    return keys | ({"rate_mbps"} if "bottleneck_mbps" in keys else set())


def _assume(cal, name, v):
    """A stated value in place of a calibrated one (--assume)."""
    s = setting(cal, {name: v})
    cal.rtt_s, cal.rate_Bps, cal.loss_down, cal.queue_bytes = s.rtt, s.rate, s.loss, s.queue
    cal.congestion, cal.initcwnd, cal.pacing, cal.processing_s = (s.cc, s.initcwnd, s.pacing,
                                                                   s.processing)
    cal.loss_up, cal.jitter_s, cal.bucket_bytes = s.loss_up, s.jitter, s.bucket
    if name == "rcv_window":
        cal.rcv_model = v == "client" and cal.rcv_window is not None
    cal.sources[name] = "assumed (--assume)"


def _intervals(r):
    rng = np.random.default_rng(SEED)
    n = len(r.measured_source)
    nt = len(r.measured_target) if r.measured_target is not None else n
    a, b = _resampled(r.replay_source, n, rng), _resampled(r.replay_target, nt, rng)
    r.intervals["saving"] = _interval(a - b)
    ma = _resampled(r.measured_source, n, rng)
    # the measured median's own uncertainty less the replayed saving's
    lo, hi = _interval(ma - (a - b))  # never below what the target can take at all
    r.intervals["predicted"] = (max(lo, r.floor), max(hi, r.floor))
    r.intervals["replay_source"] = _interval(a)
    if r.measured_target is not None and len(r.measured_target) > 1 and n > 1:
        mb = _resampled(r.measured_target, nt, rng)
        r.intervals["measured_saving"] = _interval(ma - mb)
        m = r.measured_saving  # (resample - measured) stands for (measured - true)
        r.chance = float(np.mean(_close(ma - mb, m)))


def explain(cal):
    """[(name, value, source)] of a calibration, for --explain."""
    rows = [
        ("requests", f"{len(cal.requests)} ({sum(q.fresh for q in cal.requests)} fresh)",
         cal.sources.get("requests", "")),
        ("rtt_ms", f"{cal.rtt_s * 1e3:.1f}", cal.sources.get("rtt_ms", "")),
        ("rate_mbps", f"{cal.rate_Bps * 8 / 1e6:.2f}", cal.sources.get("rate_mbps", "")),
        ("loss_down", f"{cal.loss_down:.4f}", cal.sources.get("loss_down", "")),
        ("burst", f"{cal.burst:.3f}", "P(lost | previous lost), 0: independent"),
        ("bad_loss", f"{cal.bad_loss:.3f}", cal.sources.get(
            "bad_loss", "the share a burst loses (whatif/chain.py): none read")),
        ("loss_up", f"{cal.loss_up:.4f}", cal.sources.get(
            "loss_up", "label loss_up, else 0 (a client capture cannot see what it lost "
                       "upstream)")),
        ("queue_bytes", f"{cal.queue_bytes:.0f}", cal.sources.get("queue_bytes", "")),
        ("jitter_ms", f"{cal.jitter_s * 1e3:.2f}", cal.sources.get("jitter_ms", "")),
        ("bucket_bytes", f"{cal.bucket_bytes:.0f}", cal.sources.get("bucket_bytes", "")),
        ("congestion", cal.congestion, cal.sources.get("congestion", "")),
        ("hystart", ("on" if cal.hystart else "off") if cal.congestion == "cubic" else "n/a",
         cal.sources.get("hystart", "CUBIC's, as Linux has it" if cal.congestion == "cubic"
                         else "CUBIC's only")),
        ("initcwnd", str(cal.initcwnd), cal.sources.get("initcwnd", "")),
        ("mss", str(cal.mss), "most common response segment"),
        ("head_bytes", str(cal.head_bytes), cal.sources.get("head_bytes", "")),
        ("processing_ms", f"{cal.processing_s * 1e3:.1f}", cal.sources.get("processing_ms", "")),
        ("server_ms", f"{cal.server_s * 1e3:.1f}", "request round trip - RTT - processing"),
        ("connect_ms", f"{cal.connect_s * 1e3:.2f}", "fresh: request sent after handshake"),
        ("rcv_window", ("modelled: " if cal.rcv_model else "not modelled: ")
         + ("unknown" if not cal.rcv_window else "%.1f, clamp %.1f segments" % cal.rcv_window),
         cal.sources.get("rcv_window", "")),
    ]
    for k, v in cal.estimates.items():
        rows.append((f"trace:{k}", f"{v:.4g}" if isinstance(v, float) else str(v),
                     "the trace's own estimate"))
    return rows


