"""The replay: each request of a calibrated group as it was or under a
change (a Setting), many times over (Monte-Carlo draws of the calibrated loss).

A request's time is put together as the client sees it:

    fresh:       R + connect_s (+ 1 s, 2 s, ... per lost SYN or SYN-ACK)
    persistent:  reuse_s
    then         R / 2 + processing + server_s + T_transfer
                 (+ an RTO when the request's own segment is lost)

where T_transfer (the response from the server's first send until the
client holds all of it) comes from the packet-level replay (whatif/tcp.py).
A group captured at the server is timed as the server sees it: from the
request's (or SYN's) arrival to the response's last data packet, so
R / 2 + T_transfer becomes the last send (from the first) and the R of a
fresh setup is the handshake's round trip there.
On a persistent connection the transfers of one run share the sender's
state: its warm-up responses first, then the measured ones in order. A
request that opened its connection is replayed on its own, as a fresh one,
and once more (its own size) as the warm-up of the requests after it: its
draw and theirs are apart.
"""

import collections
import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from .calibrate import WIRE_HEADER
from .receiver import Receiver
from .tcp import MAX_TIME, Conn, Path, Transfer
from . import tunnel as kcp
from . import workers

DRAWS = 400
SEED = 26
SERVER_LAST_SEND = True  # at a server a request ends at its last data packet (off: a round trip
#                         before the client's end, as before the thirteenth round)


class Derived(int):
    """A factor's value the engine filled in (a persistent target's warm-up from
    the store's runs at the target, or the default), not one the user stated."""


@dataclass
class Setting:
    """The modelled world: a calibration with changes applied."""
    rtt: float
    rate: float
    loss: float
    burst: float
    loss_up: float
    queue: float
    jitter: float
    cc: str
    initcwnd: int
    pacing: bool
    processing: float
    connection: str | None  # None: as measured
    warmup: int
    ssai: int
    rcv_window: tuple | None = None  # (first, clamp) segments; None: unlimited
    path: str = "direct"    # or through kcptun: tunnel (FEC sized for the loss), tunnel-arq
    hystart: bool = True    # CUBIC's HyStart (off: where _congestion_reading reads it so)
    warmup_stated: bool = False  # warmup was --set (else 1, or as measured; Derived: not)
    bucket: float = 0.0     # a token bucket's burst beyond a packet (bytes; tcp.Path.bucket)
    bad_loss: float = 1.0   # share a burst's bad state loses (whatif/chain.py)
    head: int = 0           # a response's header sent apart (bytes; tcp.Conn.head)


def setting(cal, changes):
    """The Setting of a calibration under {factor: value}."""
    s = Setting(cal.rtt_s, cal.rate_Bps, cal.loss_down, cal.burst, cal.loss_up,
                cal.queue_bytes, cal.jitter_s, cal.congestion, cal.initcwnd, cal.pacing,
                cal.processing_s, None, 1, 0, cal.rcv_window if cal.rcv_model else None,
                hystart=cal.hystart, bucket=cal.bucket_bytes, bad_loss=cal.bad_loss,
                head=cal.head_bytes)
    table = {"rtt_ms": ("rtt", 1e-3), "rate_mbps": ("rate", 1e6 / 8), "loss_down": ("loss", 1),
             "loss_up": ("loss_up", 1), "queue_bytes": ("queue", 1), "jitter_ms": ("jitter", 1e-3),
             "bucket_bytes": ("bucket", 1),
             "processing_ms": ("processing", 1e-3)}
    for k, v in changes.items():
        if k in table:
            name, scale = table[k]
            setattr(s, name, v * scale)
        elif k == "congestion":
            s.cc = v
        elif k == "initcwnd":
            s.initcwnd = int(v)
        elif k == "pacing":
            s.pacing = v == "fq"
        elif k == "connection":
            s.connection = v
        elif k == "warmup":
            s.warmup = int(v)
            s.warmup_stated = not isinstance(v, Derived)
        elif k == "loss_burst":  # the target loss's shape (whatif/targets.py), not a factor
            s.burst = float(v)
        elif k == "bad_loss":
            s.bad_loss = float(v)
        elif k == "slow_start_after_idle":
            s.ssai = int(v)
        elif k == "path":
            s.path = v
        elif k == "rcv_window":  # the client's Linux receive window, or none
            s.rcv_window = cal.rcv_window if v == "client" else None
    if s.loss == 0:
        s.burst, s.bad_loss = 0.0, 1.0
    return s


def _path(s):
    return Path(rtt=s.rtt, rate=s.rate, queue_bytes=s.queue, loss=s.loss, burst=s.burst,
                loss_up=s.loss_up, jitter=s.jitter, header=WIRE_HEADER, bucket=s.bucket,
                bad_loss=s.bad_loss)


def _conn(s):
    c = Conn(cc=s.cc, initcwnd=s.initcwnd, pacing=s.pacing, hystart=s.hystart, head=s.head)
    c.srtt, c.rttvar, c.min_rtt = s.rtt, s.rtt / 2, s.rtt  # the handshake's sample
    if s.rcv_window:
        c.rcv = Receiver(*s.rcv_window)
    return c


def _retries(rng, p, first):
    """Seconds lost to a packet lost with p, resent after first, 2 first, ... s."""
    t, wait = 0.0, first
    while p and rng.random() < p and wait < 64:
        t += wait
        wait *= 2
    return t


def _apart(nbytes, mss, head):
    """Bytes of the header a response of `nbytes` sends alone first: `head`
    (calibrate._head) where a body follows it, else 0."""
    return head if head and nbytes > head + mss else 0


def segments(nbytes, mss, head=0):
    """Packets of a response of `nbytes`: its header alone first where the
    server sends it apart (`head` bytes, calibrate._head) and the body
    follows, then full segments."""
    if h := _apart(nbytes, mss, head):
        return 1 + math.ceil((nbytes - h) / mss)
    return max(1, math.ceil(nbytes / mss))


def _transfer_s(conn, path, nbytes, mss, rng):
    t = Transfer(conn, path, segments(nbytes, mss, conn.head), mss, rng)
    if not _apart(nbytes, mss, conn.head):
        t.head_wire = t.wire  # (not split: its first packet is a full one)
    return t.run()


def _units(cal, s):
    """[(fresh, warmup responses, [request indexes], the request whose size a
    warm-up response has)]: the connections to replay."""
    reqs = cal.requests
    mode = s.connection
    if mode is None and s.warmup_stated and not all(q.fresh for q in reqs):
        mode = "persistent"  # a warm-up stated for the group's own connections
    if mode == "fresh" or (mode is None and all(q.fresh for q in reqs)):
        return [(True, 0, [i], i) for i in range(len(reqs))]
    if mode is None:
        units = [(True, 0, [i], i) for i, q in enumerate(reqs) if q.fresh]
        openers = {q.run: i for i, q in enumerate(reqs) if q.fresh and q.index == 0}
        runs = {}
        for i, q in enumerate(reqs):
            if not q.fresh:
                runs.setdefault(q.run, []).append(i)
        for run, idx in runs.items():
            idx.sort(key=lambda i: reqs[i].index)
            units.append((False, reqs[idx[0]].prior, idx, openers.get(run, idx[0])))
        return units
    runs = {}
    for i, q in enumerate(reqs):
        runs.setdefault(q.run, []).append(i)
    out = []
    for idx in runs.values():
        idx.sort(key=lambda i: reqs[i].index)
        first = reqs[idx[0]]
        stated = first.fresh or s.warmup_stated  # (else the warm-up it had)
        if stated and s.warmup == 0:  # its first request opens the connection:
            out.append((True, 0, idx[:1], idx[0]))  # replayed on its own and, as the
            if idx[1:]:                              # rest's warm-up, once more
                out.append((False, 1, idx[1:], idx[0]))
            continue
        out.append((False, s.warmup if stated else first.prior, idx, idx[0]))
    return out


def replay(cal, s, draws=DRAWS, seed=SEED):
    """Replayed times (s): an array (requests, draws per request). A replay
    asked for again in this process (a group's readings, replayed once more
    by each prediction from it) is the one kept, not replayed anew."""
    key = _inputs(cal, s, draws, seed)
    if key in _KEPT:
        _KEPT.move_to_end(key)
        return _KEPT[key].copy()
    out = _replay(cal, s, draws, seed)
    _KEPT[key] = out.copy()
    if len(_KEPT) > KEEP:
        _KEPT.popitem(last=False)
    return out


def delivered(times, s, group):
    """`times` (a replay under setting s), unless a transfer in it did not
    finish: a transfer stops at MAX_TIME (tcp.Transfer.run), and that is no
    time to print -- a path read as carrying next to nothing (a round trip of
    nothing with a stated rate, a loss near 1) or a response too large for
    the limit."""
    if np.max(times, initial=0.0) < MAX_TIME:
        return times
    from ..core.errors import TracekitError
    raise TracekitError(
        f"{group}: a replayed response did not arrive within {MAX_TIME:.0f} s, the replay's limit, "
        f"on the path replayed (round trip {s.rtt * 1e3:.2f} ms, rate {s.rate * 8 / 1e6:.2f} "
        f"Mbit/s, queue {s.queue:.0f} B, loss {s.loss:.1%}): no prediction; --explain shows "
        "where each value came from, --assume states one the trace cannot tell")


KEEP = 64  # replays kept (the latest asked for)
_KEPT = collections.OrderedDict()


def _inputs(cal, s, draws, seed):
    """All a replay depends on: the calibration (less its notes of where each
    value came from), the setting, the draws, and the whatif modules'
    constants (a rule switched off gives another replay)."""
    rest = tuple(getattr(cal, f.name) for f in dataclasses.fields(cal)
                 if f.name not in ("requests", "sources", "estimates"))
    return (tuple(map(dataclasses.astuple, cal.requests)), rest, dataclasses.astuple(s),
            draws, seed, tuple(sorted(workers.constants().items())))


def _replay(cal, s, draws, seed):
    n = len(cal.requests)
    per = max(4, math.ceil(draws / max(n, 1)))
    out = np.zeros((n, per))
    if s.path != "direct":
        out = _replay_tunnel(cal, s, out, seed)
        if cal.vantage == "server":  # (calibrate.Calibration.vantage)
            out -= s.rtt
    else:
        _replay_direct(cal, s, out, seed)
    return out


def _replay_direct(cal, s, out, seed):
    per = out.shape[1]
    units = _units(cal, s)
    transfers = per * sum(warm + len(idx) for _, warm, idx, _ in units)
    cut = workers.cuts(per, len(units))  # (a connection's draws cut for the workers)
    tasks = [(cal, s, u, unit, d, min(d + cut, per), seed)
             for u, unit in enumerate(units) for d in range(0, per, cut)]
    for (_, _, u, (_, _, idx, _), d0, d1, _), times in zip(
            tasks, workers.starmap(_replay_unit, tasks, transfers)):
        out[idx, d0:d1] = times


def _replay_unit(cal, s, u, unit, d0, d1, seed):
    """The times (requests of the unit, draws d0..d1-1) of one connection."""
    fresh, warm, idx, lead = unit
    out = np.zeros((len(idx), d1 - d0))
    path = _path(s)
    server = cal.vantage == "server"
    for d in range(d0, d1):
        rng = np.random.default_rng([seed, u, d])
        conn = _conn(s)
        for _ in range(warm):
            _transfer_s(conn, path, cal.requests[lead].bytes_down, cal.mss, rng)
        for k, i in enumerate(idx):
            q = cal.requests[i]
            if s.ssai and not fresh:
                conn.cwnd = min(conn.cwnd, float(s.initcwnd))
            if fresh:
                setup = (s.rtt + cal.connect_s + _retries(rng, s.loss_up, 1.0)
                         + _retries(rng, s.loss, 1.0))
            else:
                setup = cal.reuse_s
            upload = _retries(rng, s.loss_up, s.rtt + 0.2)
            t = _transfer_s(conn, path, q.bytes_down, cal.mss, rng)
            if not server:  # the request's trip, then the response until it is held
                end = s.rtt / 2 + t
            elif t >= MAX_TIME:  # not delivered: kept at the limit, for `delivered` to refuse
                end = t
            elif SERVER_LAST_SEND:
                end = conn.last_send  # at the server: its last data packet leaves
            else:  # (the client's end less a round trip)
                end = t - s.rtt / 2
            out[k, d - d0] = setup + upload + s.processing + cal.server_s + end
    return out


def _replay_tunnel(cal, s, out, seed):
    """Each request through kcptun (whatif/tunnel.py), the lab's tunnel: the
    application's connection is to the tunnel's client on its own host and
    the tunnel's session is open, so fresh or persistent there is no
    handshake across the path; the request crosses it in R/2 after a KCP
    flush, the server takes its time, and the response is KCP segments at
    the bottleneck rate with FEC sized for the loss as the lab sizes it
    (`tunnel`) or none (`tunnel-arq`), after another flush."""
    per = out.shape[1]
    tasks = [(cal, s, i, per, seed) for i in range(len(cal.requests))]
    for i, times in enumerate(workers.starmap(_replay_tunneled, tasks, per * len(tasks))):
        out[i, :] = times
    return out


def _replay_tunneled(cal, s, i, per, seed):
    """The times (draws) of request i through the tunnel."""
    data, parity = kcp.sizing(s.path, s.loss)
    q = cal.requests[i]
    out = np.zeros(per)
    for d in range(per):
        rng = np.random.default_rng([seed, i, d])
        t = kcp.transfer_s(q.bytes_down, kcp.SEGMENT, data, parity, s.loss, s.rtt,
                           s.rate, rng)
        out[d] = kcp.INTERVAL + s.rtt / 2 + s.processing + cal.server_s + t
    return out
