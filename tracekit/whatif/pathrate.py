"""What a client's capture says about the path's rate and the round trip's
spread, for the calibration (whatif/calibrate.py).

The bottleneck rate: trains of full-sized response segments (at least
`TRAIN` in a row, each gap within 10 % of the train's median gap) reach the
client spaced by the bottleneck's serialisation when they crossed its
queue; the estimate is the wire size over the median spacing of the
tightest quarter of the trains. But a sender that paces slower than the
path (BBR holding a low bandwidth estimate under heavy loss, a sender
limited by its window) also makes trains, spaced by its own pacing: their
rate is the sender's, not the path's. The flow's own arrivals bound the
path from below: the bytes that reached the client in any one round trip
T left the bottleneck within T plus the round trip's spread (a packet held
back by the delay's variation lets those behind it bunch, by at most the
spread), so the bottleneck carried at least (bytes - one packet) / (T +
spread). A train estimate below that floor is the sender's spacing: the
rate is unknown (at least the floor) -- never a number the trace
contradicts (beyond `FLOOR_SLACK`, the floor's own timing error).

The spread: the base RTT is the smallest handshake RTT; the spread of the
others is the path's delay variation, which the replay models as the lab's
forwarder does: uniform [0, jitter/2) extra each way, never reordering,
so the handshake RTT's excess is a triangular distribution on [0, jitter)
whose interquartile range is jitter x (1 - 1/sqrt(2)). The calibration
reads jitter from that range (robust to a stray slow handshake) where
there are `MIN_HANDSHAKES` or more; fewer: 0, said so.
"""

import heapq
import math

import numpy as np

TRAIN = 8
MIN_TRAINS = 3
# The floor counts whole packets in a window whose two ends the arrival
# times' own jitter moves (a forwarder's scheduling, the capture's
# timestamps: ~1 ms on a path made by hand); a train rate within this share
# under it is not contradicted by it.
FLOOR_SLACK = 0.03
# The longest a path holds packets after its bottleneck and then releases
# them back to back (the delay line's machine stalled it 9.7 ms; a link
# layer's aggregation, a host's scheduling: ms, not a round trip)
MAX_HOLD = 0.02
MIN_HANDSHAKES = 8
WIRE_HEADER = 52  # IP + TCP with timestamps
TRIANGLE_IQR = 1 - 1 / math.sqrt(2)  # IQR / width of the sum of two uniform legs


def label_float(labels, name, default):
    """A label's value as a number; `default` where it is absent or not one."""
    try:
        return float(labels[name])
    except (KeyError, ValueError, TypeError):
        return default


def trains(gaps, mss):
    """Median spacing (s) and length (segments) of each train of full-sized segments.

    A train grows while the next gap is within 10 % of the median of the
    train's gaps so far; that median is kept by two heaps as the train
    grows (a median of the whole prefix at each step made a bulk transfer's
    one long train quadratic: 16,000 segments took 2.6 s, 160,000 -- a
    230 MB download -- minutes)."""
    out = []
    for ts, size in gaps.values():
        full = size >= mss
        d = np.diff(ts)
        ok = full[1:] & full[:-1] & (d > 0)
        i = 0
        while i < len(d):
            if not ok[i]:
                i += 1
                continue
            j = _grow(d, ok, i)
            if j - i + 1 >= TRAIN:
                out.append((float(np.median(d[i:j + 1])), j - i + 2))
            i = j + 1
    return out


def _grow(d, ok, i):
    """The last gap of the train that starts at gap i (see `trains`)."""
    low, high = [-float(d[i])], []  # max-heap (negated) of the lower half, min-heap of the upper
    j = i
    while j + 1 < len(d) and ok[j + 1]:
        median = -low[0] if len(low) > len(high) else (-low[0] + high[0]) / 2
        nxt = float(d[j + 1])
        if abs(nxt - median) > 0.1 * median:
            break
        if nxt <= -low[0]:
            heapq.heappush(low, -nxt)
        else:
            heapq.heappush(high, nxt)
        if len(low) > len(high) + 1:
            heapq.heappush(high, -heapq.heappop(low))
        elif len(high) > len(low):
            heapq.heappush(low, -heapq.heappop(high))
        j += 1
    return j


def rate_floor(gaps, rtt, spread, rate=None):
    """Bytes/s the bottleneck carried at least: the most wire bytes that
    reached the client within one round trip `rtt`, less one packet, over
    rtt + `spread` (the delay's variation bunches arrivals by at most that).
    Tested against a `rate` (bytes/s), arrivals are first put back where that
    rate and the silences before them allow (`unheld`)."""
    best = 0.0
    for ts, size in gaps.values():
        if len(ts) < 2:
            continue
        packet = np.asarray(size, dtype=np.float64) + WIRE_HEADER
        if rate:
            ts = unheld(np.asarray(ts, dtype=np.float64), packet, rate)
        wire = np.cumsum(packet)
        end = np.searchsorted(ts, ts + rtt, side="right") - 1
        got = wire[end] - (wire - packet)  # bytes from i through end
        best = max(best, float(np.max(got - packet)))
    return best / (rtt + spread) if rtt > 0 else 0.0


def unheld(ts, packet, rate):
    """Arrival times with what was held after the bottleneck put back: a
    path that stalls after its bottleneck (a forwarder or a host not
    scheduled for ms, a link layer that aggregates) delivers nothing for a
    while, then what queued behind the stall back to back, faster than the
    bottleneck can send. At `rate`, each packet left the bottleneck at
    least its successor's serialisation before that one: walking back from
    the last arrival, a packet that came sooner is moved earlier, so far,
    but never by more than `MAX_HOLD` (a stall, not a sender's pause), nor
    before the packet ahead of it (as moved; a flow's first packet stays).
    A bunch the silence before it can hold is spread back over it;
    arrivals faster than `rate` with no such silence before them move at
    most `MAX_HOLD`, and the floor still contradicts the rate."""
    sent = np.cumsum(packet) / rate  # out[j] = min(ts[j], out[j + 1] - packet[j + 1] / rate)
    out = sent + np.minimum.accumulate((ts - sent)[::-1])[::-1]
    out = np.maximum(out, ts - MAX_HOLD)
    return np.maximum.accumulate(np.maximum(out, ts[0]))


def rate(gaps, mss, rtt, spread, labels, src, est):
    """The bottleneck rate (bytes/s) for the calibration: a label, else the
    trains' rate where the flow's own arrivals do not exceed it; else an
    error naming what the trace can say (its floor) and how to state it."""
    from ..core.errors import TracekitError
    found = trains(gaps, mss)
    wire = mss + WIRE_HEADER
    estimate = None
    if len(found) >= MIN_TRAINS:
        sp = np.sort([t[0] for t in found])
        estimate = wire / float(np.median(sp[:max(1, len(sp) // 4)]))
    floor = rate_floor(gaps, rtt, spread, estimate)
    est["rate_floor_mbps"] = floor * 8 / 1e6
    if estimate is not None:
        est["rate_trains"] = len(found)
        est["rate_train_mbps"] = estimate * 8 / 1e6
        if estimate >= floor * (1 - FLOOR_SLACK):
            est["rate_mbps"] = estimate * 8 / 1e6
    for name in ("bottleneck_mbps", "rate_mbps"):
        if name in labels:
            src["rate_mbps"] = f"label {name}"
            return label_float(labels, name, 0.0) * 1e6 / 8
    if "rate_mbps" in est:
        src["rate_mbps"] = (f"{len(found)} trains of >= {TRAIN} segments (the flows' own arrivals: "
                       f"at least {floor * 8 / 1e6:.2f} Mbit/s)")
        return estimate
    why = (f"fewer than {MIN_TRAINS} trains of {TRAIN} full-sized segments" if estimate is None
           else f"the trains' spacing ({estimate * 8 / 1e6:.2f} Mbit/s) is the sender's: the "
                f"flows delivered more in one round trip")
    raise TracekitError(f"the bottleneck rate is unknown: {why} (it is at least "
                        f"{floor * 8 / 1e6:.2f} Mbit/s); state it with --assume rate_mbps=N "
                        "(or label the runs bottleneck_mbps=N)")


def jitter(handshakes_s, labels, src, est, whence=None):
    """The round trip's spread (s, the replay's `jitter`): a label `jitter_ms`,
    else the handshake RTTs' interquartile range / (1 - 1/sqrt(2)), else 0.
    `whence`: whose handshakes, where not the group's own (whatif/group.py)."""
    hs = np.asarray(handshakes_s, dtype=np.float64)
    if len(hs) >= 2:  # a range seen is a spread the path has, however few saw it
        est["rtt_range_ms"] = float(hs.max() - hs.min()) * 1e3
    if len(hs) >= MIN_HANDSHAKES:
        q25, q75 = np.percentile(hs, [25, 75])
        est["jitter_ms"] = float(q75 - q25) / TRIANGLE_IQR * 1e3
    if "jitter_ms" in labels:
        src["jitter_ms"] = "label jitter_ms"
        return label_float(labels, "jitter_ms", 0.0) / 1e3
    if "jitter_ms" in est:
        src["jitter_ms"] = (f"the spread of {len(hs)} handshake RTTs (interquartile range / "
                            f"{TRIANGLE_IQR:.3f})" + (f" of {whence}" if whence else ""))
        return est["jitter_ms"] / 1e3
    src["jitter_ms"] = f"none: fewer than {MIN_HANDSHAKES} handshakes to read it from"
    return 0.0


def bucket(gaps, starts, rate, rtt, vantage, src, est):
    """Bytes a token bucket at the bottleneck (Linux's tbf, a policer's
    burst) lets through at once after an idle, beyond one packet: a FIFO
    spaces a burst by its segments' serialisation at `rate` (bytes/s), a
    bucket passes its burst back to back and spaces the rest. A flight
    after a silence of a quarter `rtt` (the bucket refilled) shows it: its
    leading segments that arrived in under half their serialisation after
    the one before, their wire bytes summed -- no more than the flight
    itself, so per response (`starts`: {flow: its responses' first
    arrivals, s}) the most any of its flights shows (a fresh connection's
    first flight of 10 segments is smaller than many buckets; its second,
    sent as fast as the first's ACKs came, is twice that); each is at most
    the bucket, less where the flights were smaller or paced (BBR's warm
    responses), more where the path bunched a few after the bottleneck:
    the upper quartile over the responses of `TRAIN` segments or more (one
    of them), where there are `MIN_TRAINS`; else 0 (a FIFO). The replay
    starts each response with the bucket full (an idle of bucket / rate
    refills it; a response follows its request's round trip). Only where
    the capture is at the data's receiver: a sender's own capture sees
    every burst back to back."""
    if vantage != "client":
        src["bucket_bytes"] = "0: a FIFO (a sender's capture cannot see the bottleneck's burst)"
        return 0.0
    per = []
    for flow, (ts, size) in gaps.items():
        ts = np.asarray(ts, dtype=np.float64)
        wire = np.asarray(size, dtype=np.float64) + WIRE_HEADER
        gap = np.diff(ts)
        spaced = np.flatnonzero(np.append(gap >= 0.5 * wire[1:] / rate, True))
        flights = np.flatnonzero(gap > rtt / 4) + 1  # the segments after a silence
        upto = np.cumsum(wire)
        first = np.unique(np.searchsorted(ts, np.asarray(starts.get(flow, ()),
                                                         dtype=np.float64) - 1e-7))
        first = first[first < len(ts)]
        if not len(first):
            continue
        ends = np.append(first[1:], len(ts))
        heads = np.union1d(first, flights[flights > first[0]])
        of = np.searchsorted(first, heads, side="right") - 1  # each head's response
        last = np.minimum(spaced[np.searchsorted(spaced, heads)], ends[of] - 1)
        most = np.zeros(len(first))
        np.maximum.at(most, of, upto[last] - upto[heads])  # (a run ends within its response)
        per += most[ends - first >= TRAIN].tolist()
    if len(per) < MIN_TRAINS:
        src["bucket_bytes"] = f"0: a FIFO (fewer than {MIN_TRAINS} responses to read a burst in)"
        return 0.0
    est["bucket_bytes"] = value = float(np.percentile(per, 75, method="lower"))
    src["bucket_bytes"] = (f"{len(per)} responses: the most of a flight that arrived back to "
                           "back (a token bucket's burst), upper quartile"
                           + ("" if value else "; none: a FIFO"))
    return value
