"""What-if, the second way: the calibrated path and workload re-run in the
lab with real kernel TCP, as measured and with the change (issue #26).

The replay (replayer.py) is a model of Linux; the emulation is Linux. From a
WhatIf's calibration, `spec` writes a lab experiment (tracekit.lab.experiment)
of one factor, `arm`, whose two levels carry every setting of the source and
of the target: the path (rtt_ms, rate_mbps, loss_down and its burstiness as a
Gilbert-Elliott chain with the same P(lost | previous lost), loss_up,
queue_bytes, a token bucket's burst, jitter_ms, a tunnel with FEC or ARQ),
the sender (congestion, initcwnd), the server's processing time, the
connection (fresh, or persistent with its warm-up and slow start after
idle) and the response's size (the group's median). `run` makes the runs (root; the arms interleaved
round by round, reversed every other round), ingests them into a store of
their own and analyses it; `Emulation` sets the emulated saving, with its
bootstrap interval, beside the replay's: where the two agree, the replay
holds for Linux on that calibration; where the emulation and the measured
saving disagree, the calibration (a guessed queue, a rate) is what is
wrong, not the replay.

Not emulated: pacing with fq (the lab has no fq qdisc) -- refused; each
request's own size (the lab sends one size).
"""

import os
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..core.errors import TracekitError
from . import chain
from .calibrate import load_requests, measured_connection
from .engine import _close, _interval, _resampled
from .replayer import SEED, setting

NAME = "whatif-emulation"
ARM = "arm"


def spec(r, trials=4, requests=4, seed=1):
    """The lab experiment (a dict, as experiment.load returns) of a WhatIf."""
    cal = r.calibration
    measured, warm = measured_connection(cal.requests, "emulate each")
    arms = {"source": _settings(setting(cal, {}), measured, warm),
            "target": _settings(setting(cal, r.target), measured, warm)}
    size = int(np.median([q.bytes_down for q in cal.requests]))
    return {"name": NAME, "workload": "tts", "trials": int(trials), "requests": int(requests),
            "seed": int(seed), "response_bytes": size, "path": {}, "fixed": {},
            "factors": {ARM: ["source", "target"]}, "levels": {ARM: arms}}


def _settings(s, measured, warm):
    """The lab settings of an engine Setting."""
    if s.pacing:
        raise TracekitError("pacing=fq cannot be emulated: the lab's kernel has no fq qdisc")
    if s.cc == "cubic" and not s.hystart:
        raise TracekitError("CUBIC without HyStart (read from the runs: --explain) cannot be "
                            "emulated: tcp_cubic's hystart switch is the whole machine's")
    out = {"rtt_ms": round(s.rtt * 1e3, 3), "rate_mbps": round(s.rate * 8 / 1e6, 4),
           "loss_down": s.loss, "loss_up": s.loss_up, "queue_bytes": int(s.queue),
           "jitter_ms": round(s.jitter * 1e3, 3), "congestion": s.cc,
           "initcwnd": int(s.initcwnd), "processing_ms": round(s.processing * 1e3, 3)}
    if s.bucket:  # the lab's bottleneck as a token bucket (lab/wan.py)
        out["bucket_bytes"] = int(round(s.bucket))
    if s.burst > 0 and s.loss > 0:  # the lab's Gilbert-Elliott path, the replay's chain
        enter, stay, bad_loss = chain.rates(s.loss, s.burst, s.bad_loss)
        out.update(loss_down=0.0, burst_r_down=1.0 - stay, burst_loss_down=bad_loss,
                   burst_p_down=enter)
    connection = s.connection or measured
    out["connection"] = connection
    if connection == "persistent":
        out["warmup"] = int(s.warmup if s.connection or s.warmup_stated else warm)
        out["slow_start_after_idle"] = int(s.ssai)
    if s.path != "direct":
        out["path"] = "tunnel"
        out["fec"] = "none" if s.path == "tunnel-arq" else "auto"
    return out


@dataclass
class Emulation:
    spec: dict
    workdir: str
    source_s: np.ndarray      # each emulated request's time at the source arm
    target_s: np.ndarray
    replay_saving: float      # the WhatIf's (s)
    measured_source_s: float  # the group's measured median
    disturbed: tuple = ()     # runs the machine held up (the lab's note)

    @property
    def saving(self):
        return float(np.median(self.source_s) - np.median(self.target_s))

    @cached_property
    def interval(self):
        rng = np.random.default_rng(SEED)
        return _interval(_resampled(self.source_s, len(self.source_s), rng)
                         - _resampled(self.target_s, len(self.target_s), rng))

    @property
    def agree(self):
        """The replay's saving within max(10 %, 10 ms) of the emulated one."""
        return bool(_close(self.replay_saving, self.saving))

    @property
    def replay_inside(self):
        """The replay's saving inside the emulated saving's 95 % interval (a few
        lossy requests an arm leave it wide: agreement within 10 % is then luck)."""
        lo, hi = self.interval
        return bool(lo <= self.replay_saving <= hi)

    @property
    def source_error(self):
        """Emulated source median / measured - 1: how well the calibrated path
        and workload reproduce the group itself."""
        return float(np.median(self.source_s)) / self.measured_source_s - 1.0


def run(r, workdir, trials=4, requests=4, progress=None):
    """Emulate a WhatIf in the lab under `workdir` (root): an Emulation."""
    from ..lab import experiment as ex
    from ..lab.netns import require_root
    from ..pipeline.analyze import analyze
    from ..pipeline.ingest import ingest_runs
    from ..pipeline.manifests import run_inputs
    from ..pipeline.stores import open_store
    from ..store.db import remove_store
    sp = spec(r, trials, requests)
    require_root()
    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as e:
        raise TracekitError(f"{workdir}: cannot make the emulation's folder: "
                            f"{e.strerror}") from None
    manifests = ex.run_experiment(sp, workdir, progress)
    db = os.path.join(workdir, f"{NAME}.duckdb")
    remove_store(db)  # an earlier emulation's, and its log
    con = open_store(db)
    try:
        ingest_runs(con, run_inputs(manifests, workdir))
        analyze(con)
        times = {arm: load_requests(con, {ARM: arm}).duration_ns.to_numpy() / 1e9
                 for arm in ("source", "target")}
    finally:
        con.close()
    for arm, t in times.items():
        if not len(t):
            raise TracekitError(f"{workdir}: the emulation's {arm} runs have no requests "
                                f"(their logs and captures are there)")
    return Emulation(sp, workdir, times["source"], times["target"], r.saving,
                     float(np.median(r.measured_source)), tuple(ex.disturbed(manifests)))
