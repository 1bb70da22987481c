"""A replay's draws in worker processes (tracekit/whatif/workers.py) give
the numbers one process gives, constants changed here included; a replay
asked for again is the one kept."""

import os
import subprocess
import sys

import numpy as np

from tracekit.whatif import replayer, tcp, workers
from tracekit.whatif.calibrate import Calibration, Request


def _calibration():
    # a fresh connection, then a run of two on one connection after a warm-up
    reqs = [Request("a", "run-1", 0, 1.0, 200_000, True, 0),
            Request("b", "run-2", 0, 1.0, 150_000, False, 1),
            Request("c", "run-2", 1, 1.0, 250_000, False, 1)]
    return Calibration(reqs, rtt_s=0.06, rate_Bps=10e6 / 8, loss_down=0.03, burst=0.3,
                       loss_up=0.01, queue_bytes=60_000, congestion="cubic", initcwnd=10,
                       pacing=False, mss=1448, processing_s=0.02, server_s=0.0,
                       connect_s=0.0, reuse_s=0.0)


def _both(monkeypatch, cal, s):
    monkeypatch.setattr(replayer, "KEEP", 0)  # (each replayed, none kept)
    out = []
    for n in ("1", "2"):
        monkeypatch.setenv("TRACEKIT_WORKERS", n)
        out.append(replayer.replay(cal, s, draws=300, seed=7))
    return out


def test_workers_replay_what_one_process_replays(monkeypatch):
    cal = _calibration()
    s = replayer.setting(cal, {})
    assert 3 * 100 >= workers.MIN_TRANSFERS  # (the replay below goes to the workers)
    one, two = _both(monkeypatch, cal, s)
    assert one.shape == (3, 100) and np.array_equal(one, two)
    # the workers are other processes
    monkeypatch.setenv("TRACEKIT_WORKERS", "2")
    pids = set(workers.starmap(os.getpid, [()] * 8, transfers=workers.MIN_TRANSFERS))
    assert pids and os.getpid() not in pids
    # a rule switched off here is off there: recovery chained after a recovery
    monkeypatch.setattr(tcp, "CHAINED_RECOVERY", False)
    one_off, two_off = _both(monkeypatch, cal, s)
    assert np.array_equal(one_off, two_off) and not np.array_equal(one_off, one)
    # the tunnel's replay too
    tunneled = replayer.setting(cal, {"path": "tunnel"})
    one, two = _both(monkeypatch, cal, tunneled)
    assert np.array_equal(one, two) and one.min() > 0.03


def test_a_users_script_without_a_main_guard_runs_once(tmp_path):
    """Spawned workers start from a fresh interpreter, which would run the
    main script again: one that calls the engine at its top level runs once."""
    script = tmp_path / "mine.py"
    script.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))!r})\n"
        "print('top level', flush=True)\n"
        "from tracekit.whatif import workers\n"
        "pids = set(workers.starmap(os.getpid, [()] * 8, transfers=10**6))\n"
        "print('in this process:', os.getpid() in pids, flush=True)\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       env={**os.environ, "TRACEKIT_WORKERS": "2"}, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("top level") == 1 and "in this process: False" in r.stdout, r.stdout
    assert not r.stderr, r.stderr[-2000:]


def _dies_in_a_worker(x):
    if os.environ.get("TRACEKIT_WORKERS") == "1":  # (so it is in each worker)
        os._exit(3)
    return 2 * x


def test_a_worker_that_dies_leaves_its_tasks_to_the_command(monkeypatch):
    monkeypatch.setenv("TRACEKIT_WORKERS", "2")
    tasks = [(i,) for i in range(8)]
    assert workers.starmap(_dies_in_a_worker, tasks, transfers=10**6) == [2 * i for i in range(8)]
    # and the next replay has workers again
    pids = set(workers.starmap(os.getpid, [()] * 8, transfers=10**6))
    assert pids and os.getpid() not in pids


def test_a_replay_asked_again_is_the_one_kept(monkeypatch):
    cal = _calibration()
    s = replayer.setting(cal, {})
    ran = []
    real = replayer._replay
    monkeypatch.setattr(replayer, "_replay", lambda *a: ran.append(a) or real(*a))
    first = replayer.replay(cal, s, draws=24, seed=11)
    again = replayer.replay(cal, s, draws=24, seed=11)
    assert len(ran) == 1 and np.array_equal(first, again) and again is not first
    again[0, 0] = -1.0  # (what a caller does to its copy stays there)
    assert replayer.replay(cal, s, draws=24, seed=11)[0, 0] == first[0, 0]
    # anything else the replay depends on is replayed: a request's size, the
    # setting, the seed, a module's constant; a note of where a value came from is not
    cal.requests[1].bytes_down += 1
    replayer.replay(cal, s, draws=24, seed=11)
    replayer.replay(cal, replayer.setting(cal, {"rtt_ms": 20}), draws=24, seed=11)
    replayer.replay(cal, s, draws=24, seed=12)
    monkeypatch.setattr(tcp, "CHAINED_RECOVERY", False)
    replayer.replay(cal, s, draws=24, seed=12)
    cal.sources["rtt_ms"] = "a note"
    replayer.replay(cal, s, draws=24, seed=12)
    assert len(ran) == 5


def test_progress_counts_every_transfer_replayed_in_one_process_or_many(monkeypatch):
    """`tracekit whatif` shows the replays' progress (a bulk response's replay
    is minutes): the hook hears of every transfer once, whether the draws
    ran here or in the workers -- 100 draws of a fresh request and of a
    warm-up and two requests on one connection: 400."""
    cal = _calibration()
    s = replayer.setting(cal, {})
    heard = []
    workers.on_progress(heard.append)
    try:
        for n in ("1", "2"):
            heard.clear()
            replayer._KEPT.clear()  # (replayed, not found kept by a test before)
            monkeypatch.setattr(replayer, "KEEP", 0)
            monkeypatch.setenv("TRACEKIT_WORKERS", n)
            replayer.replay(cal, s, draws=300, seed=7)
            assert len(heard) > 1 and abs(sum(heard) - 400) < 1e-6, (n, heard)
    finally:
        workers.on_progress(None)
