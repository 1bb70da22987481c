"""How long the machine took the CPU from a lab run while it measured.

A lab run's timings are only as good as the machine's promptness: on a
shared 2-core box a virtual CPU can be taken away for milliseconds, and the
kernel's own threads (ksoftirqd, which finishes TCP's receive work when a
burst outlasts its budget) wait behind whatever else runs. The path's
forwarder logs its own lateness; this probe measures what the forwarder
cannot see: one process per CPU, pinned to it, that asks to sleep 1 ms at a
time and logs every wake-up more than LATE_NS after its deadline, the way
cyclictest does. Each line of its log is an interval during which that CPU
did not run the lab when it was due. Where real-time scheduling is allowed
it runs above every lab process (FIFO 20; the forwarder is FIFO 10, the
endpoints round-robin 5), so the lab's own work, the forwarder's polling
included, does not count: only what took the CPU from the lab (another
virtual machine on the host, interrupts). Without it the probe is an
ordinary process like every lab process, and counts what they all wait for.

Tests hold a measured interval against the configured path plus the time
the probe saw the machine away during that interval (`held_back`): a
measurement from the same run, not an allowance guessed in advance.
"""

import json
import os
import signal
import subprocess
import sys
import time

from . import netns

PERIOD_NS = 1_000_000
PR_SET_PDEATHSIG = 1
PRIORITY = 20
LATE_NS = 300_000  # wake-ups later than this are logged (quiet machine: 50-100 us)


class Probe:
    """One sleeper per CPU for the length of a block.

        with Probe(workdir) as probe:
            ...
        probe.held_back(start_ns, end_ns)  # ns the machine was away within the interval
    """

    def __init__(self, workdir):
        self.paths = []
        self.procs = []
        self.workdir = workdir
        self.late = []  # (cpu, wall ns when the sleep began, wall ns when it woke)

    def __enter__(self):
        for cpu in sorted(os.sched_getaffinity(0)):
            path = os.path.join(self.workdir, f"disturbance-cpu{cpu}.jsonl")
            if os.path.exists(path):  # an earlier path's, in the same folder
                os.remove(path)
            proc = subprocess.Popen([sys.executable, "-m", "tracekit.lab.disturbance", str(cpu), path],
                                    stdout=subprocess.PIPE, text=True)
            self.paths.append(path)
            self.procs.append(proc)
        for proc in self.procs:
            proc.stdout.readline()  # "ready"
        return self

    def __exit__(self, *exc):
        for proc in self.procs:
            netns.stop(proc)
            proc.stdout.close()
        self._load(self.paths)
        return False

    @classmethod
    def read(cls, workdir):
        """The probe's record of a finished run, from the files it left in `workdir`."""
        probe = cls(workdir)
        probe._load(os.path.join(workdir, name) for name in sorted(os.listdir(workdir))
                    if name.startswith("disturbance-cpu") and name.endswith(".jsonl"))
        return probe

    def _load(self, paths):
        for path in paths:
            if os.path.exists(path):
                with open(path) as f:
                    self.late += [tuple(json.loads(line)) for line in f]

    def held_back(self, start_ns, end_ns):
        """ns by which due wake-ups were late within [start_ns, end_ns], all CPUs summed."""
        total = 0
        for _, slept, woke in self.late:
            if woke > start_ns and slept < end_ns:
                total += woke - slept - PERIOD_NS
        return total

    def summary(self):
        """For a run's manifest: the worst wake-up and how many were late."""
        worst = max((w - s - PERIOD_NS for _, s, w in self.late), default=0)
        return {"late_wakeups": len(self.late), "max_late_ms": round(worst / 1e6, 3),
                "late_ms_total": round(sum(w - s - PERIOD_NS for _, s, w in self.late) / 1e6, 3)}


def _sleep_and_log(cpu, path):
    """The probe process: sleep PERIOD_NS at a time on `cpu`, log late wake-ups."""
    netns.libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)  # the lab died: end too
    os.sched_setaffinity(0, {cpu})
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(PRIORITY))
    except OSError:
        pass  # an ordinary process, like the lab's own
    parent = os.getppid()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the lab stops it
    late = []
    print("ready", flush=True)
    period = PERIOD_NS / 1e9
    while not stop and os.getppid() == parent:
        slept = time.time_ns()
        time.sleep(period)
        woke = time.time_ns()
        if woke - slept - PERIOD_NS > LATE_NS:
            late.append((cpu, slept, woke))
    with open(path, "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in late)


if __name__ == "__main__":
    _sleep_and_log(int(sys.argv[1]), sys.argv[2])
