"""What every benchmark here shares: whole processes, alternated, medians, load.

Each tool runs as its own process (import, start-up and compilation count);
wall time and the process's peak resident memory (`ru_maxrss` of the child)
are measured. Rounds alternate the tools and reverse their order every other
round (A B C, C B A, ...) so drift of the machine hits all alike; the tables
give medians over rounds, with the 1-minute load average before and after and
the number of cores, so a reader can judge how busy the machine was.
"""

import os
import statistics
import subprocess
import sys
import time


def run(cmd, env=None):
    """Run a command to completion; (seconds, peak RSS in MB). Exits on failure."""
    return run_cpu(cmd, env)[:2]


def run_cpu(cmd, env=None):
    """Run a command to completion; (seconds, peak RSS in MB, CPU seconds: user +
    system, its threads included; steadier than the wall time on a busy
    machine, blind to waiting). Exits on failure."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{err}")
    return seconds, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tracekit_command(tree=ROOT):
    """The command that runs the tracekit of source tree `tree`, and its
    environment: `python -P` from a neutral directory, the tree first on the
    path (`python -m` would put the working directory first: run from another
    checkout, that checkout's tracekit would be the one measured)."""
    env = {"PYTHONPATH": os.pathsep.join([tree, *filter(None, [os.environ.get("PYTHONPATH")])])}
    return [sys.executable, "-P", "-m", "tracekit.cli"], env


def compile_kernels(tree=ROOT):
    """Compile the kernels of tracekit's tree `tree` before timing anything (as
    `make` does), and its modules' bytecode (as `pip install` does): the
    one-time compilation of a fresh install is not what the tables measure.
    (Under PYTHONDONTWRITEBYTECODE=1 a source tree's modules were compiled
    from source in every timed process: 0.12 of the 200 k slice's ~1.0 CPU s.)"""
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(tree, "tracekit")],
                   check=True, stdout=subprocess.DEVNULL)
    samples = [os.path.join(ROOT, "captures", n) for n in
               ("lossy-download-server.pcap", "udp-echo.pcapng")]
    env = {**os.environ, **tracekit_command(tree)[1]}
    subprocess.run([sys.executable, "-P", "-m", "tracekit.pipeline.warmup", *samples], check=True,
                   stdout=subprocess.DEVNULL, env=env, cwd="/")


def load():
    """The 1-minute load average and the cores of this machine."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0]), os.cpu_count()


def alternate(tools, rounds, before=None):
    """{name: [(seconds, MB), ...]} over `rounds` alternated rounds; `before(name)`
    is called (untimed) before each run (e.g. to restore a database)."""
    results = {name: [] for name in tools}
    names = list(tools)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            if before:
                before(name)
            out = tools[name]()
            results[name].append(out)
            cpu = f", {out[2]:.2f} s CPU" if len(out) > 2 else ""
            print(f"round {r + 1}: {name}: {out[0]:.2f} s, {out[1]:,.0f} MB{cpu}", file=sys.stderr)
    return results


def medians(samples):
    """Median of each field over the rounds' (seconds, MB[, CPU seconds])."""
    return tuple(statistics.median(x) for x in zip(*samples))


def count_packets(path):
    out = subprocess.run(["capinfos", "-c", "-M", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "Number of packets" in line:
            return int(line.split(":")[1].strip())
    raise SystemExit(f"capinfos could not count {path}")


def warm(path):
    """Read a file once so every tool finds it in the page cache."""
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass
