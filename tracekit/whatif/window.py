"""The loss-based senders' window in the replay (whatif/tcp.py): Reno and
CUBIC as Linux's tcp_cong.c and tcp_cubic.c keep it, in whole segments.

- Growth only on an ACK that moves the cumulative point (tcp_may_raise_cwnd:
  FLAG_DATA_ACKED; an ACK that only SACKs does not raise the window), by
  the segments it delivered, and only while tcp_is_cwnd_limited.
- Slow start: +1 a segment up to ssthresh, the rest of the ACK goes to
  congestion avoidance (tcp_slow_start).
- Congestion avoidance, tcp_cong_avoid_ai: +1 each time `cnt` segments have
  been delivered; Reno's cnt is the window; CUBIC's comes from bictcp_update:
  the cubic W(t) = C (t - K)^3 + origin, C = 410 / 1024, t from the epoch's
  start plus delay_min; K = 0 and origin = cwnd when the window is already
  at its last maximum, so a connection that never lost grows convex at once,
  at least 1 in 20 delivered (cnt <= 20 while last_max is 0); the
  Reno-friendly estimate caps cnt.
- On a loss episode: Reno ssthresh = cwnd / 2; CUBIC 717 / 1024 of it, with
  fast convergence (last_max = cwnd x 1741 / 2048 when below the previous
  maximum), integer arithmetic as Linux's. An RTO recomputes ssthresh only
  from Open or Disorder (tcp_enter_loss), and resets CUBIC (last_max,
  delay_min, HyStart: cubictcp_state on TCP_CA_Loss).
- HyStart (CUBIC, hystart_update): rounds (until the cumulative ACK
  passes the highest segment sent when the round began) counted from the
  connection's first ACK, so that each begins with a flight -- Linux moved
  the window's check after the round's reset in 2024 ("fix spurious Hystart
  ACK train detections", 6.11 and the stable trees); counted only from a
  window of 16, before that a round began wherever the window reached 16,
  mid-flight, and its first samples saw the flight's queue. From a window
  of 16 in slow start a round ends slow start (ssthresh = cwnd) when its ACKs come as one train,
  none more than 2 ms after the one before, for longer than half of
  delay_min + the GSO cushion (min(1 ms, 4 x 64 KB / pacing rate); not
  halved when the sender paces), or when the least of its first 8 RTT
  samples exceeds delay_min by clamp(delay_min / 8, 4 ms, 16 ms). Once
  found, not again on that connection until an RTO; never where the
  calibration read it off (Conn.hystart: engine._congestion_reading).

The lab's CUBIC runs show what these do (docs/whatif.md, eighth round):
after a 245-segment warm-up on 50 ms / 25 Mbit/s the kernel's window is 140
with ssthresh 134 (the ACK train: 80 + 53 ACKs 0.48 ms apart > 25.5 ms),
then 152, 164, 176 after each further response (1 in 20).
"""

from dataclasses import dataclass

CUBIC_C = 410 / 1024          # bic_scale x 10 / 1024
BETA = 717                    # / 1024
BETA_SCALE = 8 * (1024 + BETA) // 3 // (1024 - BETA)  # the Reno-friendly pace (15)
HYSTART_LOW_WINDOW = 16
HYSTART_MIN_SAMPLES = 8
HYSTART_ACK_DELTA = 0.002     # s
HYSTART_DELAY = (0.004, 0.016)
GSO_MAX = 65536               # bytes: the cushion's TSO packet
CNT_EVERY = 1 / 32            # s: the count is kept this long while the window stays


@dataclass
class Cubic:
    """bictcp's state, per connection."""
    last_max: int = 0
    epoch: float | None = None  # None: no epoch (epoch_start 0); shifted to a response's
    #                             clock it is often before its 0: negative, still an epoch
    k: float = 0.0
    origin: int = 0
    ack_cnt: int = 0
    tcp_cwnd: int = 0
    delay_min: float = 0.0
    found: bool = False
    round_start: float = 0.0
    last_ack: float = 0.0
    end_seq: int = 0          # a segment of the current transfer
    curr_rtt: float = 1e9
    sample_cnt: int = 0
    cnt: int = 0              # segments per +1, kept between ACKs (ca->cnt)
    last_cwnd: int = 0        # the window and time of the count's last computation
    last_time: float = -1e9


def state(c):
    if c.cubic is None:
        c.cubic = Cubic()
    return c.cubic


def new_transfer(c, last_send):
    """A response starts at 0 on its own clock, `last_send` s after the
    connection's last send on the previous response's clock: CUBIC's epoch
    does not run while the sender is idle (cubictcp_cwnd_event,
    CA_EVENT_TX_START: epoch_start += the idle), so on the new clock it
    is as far before 0 as it was before that last send, and never after 0
    (an epoch begun by an ACK after that send: Linux caps it at now).
    HyStart's round ends at the response's first ACK (Linux's end_seq is
    the previous response's end)."""
    cu = c.cubic
    if cu is not None:
        cu.end_seq = 0
        if cu.epoch is not None:
            cu.epoch = min(cu.epoch - last_send, 0.0)


def end_transfer(c, end):
    """A response ends at `end` on its clock; the next one's clock starts at
    its first send, no earlier: the count's last computation (last_time, a
    wall clock's) moves back by that much -- the idle after it is not known
    here, so on a path under 1/32 s a count may be kept where Linux would
    recompute it."""
    if c.cubic is not None:
        c.cubic.last_time -= end


def on_loss(c, rto=False, recovering=False):
    """ssthresh (and cwnd, which PRR then sets) at a loss episode's start
    (tcp_enter_recovery) or an RTO (tcp_enter_loss)."""
    w = int(c.cwnd)
    if not (rto and recovering):  # an RTO in Recovery or Loss keeps ssthresh
        if c.cc == "reno":
            c.ssthresh = float(max(w >> 1, 2))
        else:
            cu = state(c)
            cu.epoch = None
            cu.last_max = (w * (1024 + BETA)) // 2048 if w < cu.last_max else w
            c.ssthresh = float(max(w * BETA // 1024, 2))
    c.cwnd_cnt = 0
    if rto:
        if c.cc == "cubic":
            c.cubic = Cubic()  # bictcp_reset + bictcp_hystart_reset
        c.cwnd = 1.0
    else:
        c.cwnd = c.ssthresh


def on_sample(tr, rtt):
    """cubictcp_acked: an ACK's RTT sample (s) of a segment not sent again."""
    c = tr.c
    if c.cc != "cubic":
        return
    cu = state(c)
    if cu.epoch is not None and tr.now - cu.epoch < 1.0:
        return  # "discard delay samples right after fast recovery"
    rtt = max(rtt, 1e-6)
    if not cu.delay_min or rtt < cu.delay_min:
        cu.delay_min = rtt
    if c.hystart and not cu.found and c.cwnd < c.ssthresh:
        _hystart(tr, cu, rtt)


def _hystart(tr, cu, rtt):
    c, now = tr.c, tr.now
    if tr.cum > cu.end_seq:  # a new round (bictcp_hystart_reset)
        cu.round_start = cu.last_ack = now
        cu.end_seq = tr.nxt
        cu.curr_rtt, cu.sample_cnt = 1e9, 0
    if c.cwnd < HYSTART_LOW_WINDOW:  # rounds counted from the first ACK, found from 16
        return
    if now - cu.last_ack <= HYSTART_ACK_DELTA:
        cu.last_ack = now
        rate = (2.0 if c.cwnd < c.ssthresh / 2 else 1.2) * c.cwnd * tr.mss / max(c.srtt, 1e-6)
        threshold = cu.delay_min + min(0.001, 4 * GSO_MAX / rate)
        if not c.pacing:
            threshold /= 2
        if now - cu.round_start > threshold:
            cu.found, c.ssthresh = True, c.cwnd
    cu.curr_rtt = min(cu.curr_rtt, rtt)
    if cu.sample_cnt < HYSTART_MIN_SAMPLES:
        cu.sample_cnt += 1
    elif cu.curr_rtt > cu.delay_min + min(max(cu.delay_min / 8, HYSTART_DELAY[0]),
                                          HYSTART_DELAY[1]):
        cu.found, c.ssthresh = True, c.cwnd


def grow(tr, acked):
    """tcp_cong_avoid on an ACK that delivered `acked` segments and moved the
    cumulative point, outside a window reduction."""
    c = tr.c
    if c.cwnd < c.ssthresh:
        if not (tr.cwnd_limited or c.cwnd < 2 * tr.max_out):  # tcp_is_cwnd_limited
            return
        room = c.ssthresh - c.cwnd
        c.cwnd = min(c.cwnd + acked, c.ssthresh)
        acked -= min(acked, room)
        if not acked:
            return
    elif not tr.cwnd_limited:
        return
    w = int(c.cwnd)
    cnt = w if c.cc == "reno" else _cubic_cnt(tr, w, acked)
    _ai(c, cnt, acked)


def _ai(c, w, acked):
    """tcp_cong_avoid_ai: +1 for every w segments delivered."""
    if c.cwnd_cnt >= w:
        c.cwnd_cnt = 0
        c.cwnd += 1
    c.cwnd_cnt += acked
    if c.cwnd_cnt >= w:
        delta = c.cwnd_cnt // w
        c.cwnd_cnt -= delta * w
        c.cwnd += delta


def _cubic_cnt(tr, w, acked):
    """bictcp_update: segments to deliver per +1 of the window. As Linux
    (6.12+, usec last_time) it recomputes the cubic's count at most every
    1/32 s while the window stays the same (CNT_EVERY), and at most once a
    millisecond within an epoch (the Reno-friendly cap alone then); the
    count, capped, is kept between ACKs (ca->cnt)."""
    cu, now = state(tr.c), tr.now
    cu.ack_cnt += acked
    since = now - cu.last_time
    if cu.last_cwnd == w and since <= CNT_EVERY:
        return cu.cnt
    if cu.epoch is None or since >= 0.001:
        cu.last_cwnd, cu.last_time = w, now
        if cu.epoch is None:
            cu.epoch, cu.ack_cnt, cu.tcp_cwnd = now, acked, w
            if cu.last_max <= w:
                cu.k, cu.origin = 0.0, w
            else:
                cu.k, cu.origin = ((cu.last_max - w) / CUBIC_C) ** (1 / 3), cu.last_max
        t = now - cu.epoch + cu.delay_min
        offs = int(CUBIC_C * abs(t - cu.k) ** 3)
        target = cu.origin - offs if t < cu.k else cu.origin + offs
        cu.cnt = int(w / (target - w)) if target > w else 100 * w
        if cu.last_max == 0 and cu.cnt > 20:
            cu.cnt = 20
    delta = (w * BETA_SCALE) >> 3  # segments per +1 of the Reno-friendly window
    while delta and cu.ack_cnt > delta:
        cu.ack_cnt -= delta
        cu.tcp_cwnd += 1
    if cu.tcp_cwnd > w:
        cu.cnt = min(cu.cnt, w // (cu.tcp_cwnd - w))
    cu.cnt = max(cu.cnt, 2)
    return cu.cnt
