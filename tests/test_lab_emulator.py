"""The emulated path holds the chapter's path (docs/timing-model.md, the motivating case): 333 Mbit/s
with a 200 ms round trip, its queue one bandwidth-delay product (8.3 MB).

Measured from outside the forwarder (tracekit.lab.calibrate): a real kernel
TCP download of 80 MB, the two namespaces' tcpdump captures read by tshark.
The rate is timed at the client over the longest stretch in which, by the
path's own schedule, the bottleneck never idled (about 1.6 s here); the
delays are each packet's one-way time (upstream) or its arrival against the
schedule the model gives it from when the server's capture saw it leave
(downstream). The bounds are the issue's: rate within 2 %, delay within
0.5 ms -- for 99 % of packets each way, not counting those the machine's
disturbances explain, each by evidence from the run (docs/lab.md,
calibrate.unexplained): the disturbance probe saw the machine away (a
virtual machine's CPU taken by the host: 1-11 ms at a time here), or the
forwarder's own log shows a lane that did nothing for more than 0.5 ms
while a packet waited for it (a real-time thread on a CPU of its own that
is not run), when the packet was due or it was read, or in the catch-up
after.

A run during which the host took more than 2 % of the machine's CPU time
(/proc/stat's steal; seen here: 0-0.3 % in a quiet hour, 7-50 % in a busy
one, when even a run with 2-5 % had busy stretches that began 2 ms late
with nothing the probe saw), or during which the probe, a real-time
process, was kept from running for more than 10 ms at once (6-7 ms in
quiet runs; a CI run that saw 45 ms, with 0.15 % steal, also had 356 ACKs
1.1-1.5 ms late in a stretch the probe did not see; a run with 20 ms, 313),
cannot judge an emulator that needs 1.3 of the 2 CPUs: the test tries
three times and skips, saying so, if every run was taken.

Once on a quiet machine, once beside two busy loops (ordinary processes: the
path and the programs it carries run at real-time priority), under the same
rule. On 2026-12-02, 19 runs beside the loops left 0-18 packets
unexplained of 28,966-29,900 up and 0-4 of 55,255-55,256 down (the bound
lets ~290 and 552 through); judged by the probe alone, one of them left
4,041 of 55,256 down unexplained (a CI run that day: 4,169), all but 4 of
them late by spells the forwarder's log shows its downstream lane not run
with a packet waiting (0.74-2.1 ms).
"""

import contextlib
import os
import shutil
import subprocess
import sys

import pytest

from tracekit.lab.calibrate import calibrate, unexplained
from tracekit.lab.wan import Direction, PathSpec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces)"),
    pytest.mark.skipif(not shutil.which("tcpdump"), reason="tcpdump is not installed"),
    pytest.mark.skipif(not shutil.which("tshark"), reason="the captures are read by tshark"),
]

RATE = 333
CHAPTER = PathSpec(up=Direction(delay_ms=100),
                   down=Direction(delay_ms=100, rate_mbps=RATE, queue_bytes=8_325_000), seed=1)


@contextlib.contextmanager
def busy_loops(n):
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in loops:
            p.kill()
            p.wait()


STEAL_SHARE = 0.02  # a run judges the emulator when the host took under 2 % of the CPUs
AWAY_MS = 10  # and the probe was never kept from running longer than this
ATTEMPTS = 3


@pytest.mark.parametrize("hog", [0, 2], ids=["quiet", "two-busy-loops"])
def test_the_chapters_path_holds_its_rate_and_delay(hog, tmp_path):
    tried = []
    for attempt in range(ATTEMPTS):
        work = tmp_path / str(attempt)
        work.mkdir()
        with busy_loops(hog):
            m, stats, probe = calibrate(CHAPTER, str(work), 80_000_000)
        share = m["steal_cpu_s"] / (m["wall_s"] * m["cpus"])
        away = stats["machine"]["max_late_ms"]
        tried.append((round(share, 3), round(away, 1)))
        if share <= STEAL_SHARE and away <= AWAY_MS:
            break
    else:
        pytest.skip(f"(steal share, longest time the probe was kept away in ms) of each of "
                    f"{ATTEMPTS} runs: {tried}; the limits are {STEAL_SHARE} and {AWAY_MS} ms: "
                    f"no run can judge the emulator")
    late = m.pop("late")
    held = m.pop("lane_held")
    report = f"{m} forwarder={stats} lane held (s)={held}"
    assert sum(stats["dropped"]["down"].values()) == 0, report  # a path measure, not loss recovery
    assert m["busy_s"] > 1.0, report
    assert m["rate_mbps"] == pytest.approx(RATE, rel=0.02), report
    up, down = m["up_error_ms"], m["down_error_ms"]
    assert up["n"] > 5_000 and down["n"] > 50_000, report
    assert up["min"] >= 0 and down["min"] >= -0.001, report  # never early
    # 99 % of packets each way within 0.5 ms of their schedule, or held up
    # while the probe saw the machine away (and the forwarder catching up)
    for way, n in (("up", up["n"]), ("down", down["n"])):
        left = unexplained(late[way], probe, held[way])
        assert len(left) <= 0.01 * n, f"{way}: {len(left)} of {n} late, e.g. {left[:5]}; {report}"
