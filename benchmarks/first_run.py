"""The first run after a fresh install against the second: is there a
first-run penalty?

    python benchmarks/first_run.py [CAPTURE] [--packets 440000] [--control]

Builds the wheel of this tree (`pip wheel --no-deps`: the build hook,
hatch_build.py, compiles the kernels into it), installs it into a fresh
venv in a temporary folder (its dependencies from pip's cache or the
package index), points the user's cache (XDG_CACHE_HOME) at an empty
folder, and then times, as whole processes of the installed `tracekit`,
ingest and analyze of the first PACKETS packets of CAPTURE (default: the
mixed workload, benchmarks/data/kernel-tcp-mix-128.pcap) into a new store,
twice: the first pair is what a new user's first command pays, the
second the same work with every cache warm. Prints wall and CPU seconds of
each and the differences. `--control` does the same with a wheel built
without the hook (TRACEKIT_NO_PRECOMPILE=1), so the table shows what the
hook saves. Nothing is kept.
"""

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, load, run_cpu  # noqa: E402

MIX = os.path.join(ROOT, "benchmarks", "data", "kernel-tcp-mix-128.pcap")


def quietly(cmd, env=None):
    """Run pip and the like; their output only if they fail."""
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stdout}{done.stderr}")


def build_wheel(work, precompile):
    out = work / ("wheel" if precompile else "wheel-plain")
    env = {**os.environ, **({} if precompile else {"TRACEKIT_NO_PRECOMPILE": "1"})}
    quietly([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), ROOT], env)
    return next(out.glob("tracekit-*.whl"))


def install(wheel, venv):
    quietly([sys.executable, "-m", "venv", str(venv)])
    quietly([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
             "--disable-pip-version-check", str(wheel)])
    return str(venv / "bin" / "tracekit")


def two_runs(tracekit, capture, work, name):
    """[(step, round, seconds, MB, CPU s)] for ingest + analyze, twice."""
    cache = work / f"cache-{name}"
    cache.mkdir()
    env = {"XDG_CACHE_HOME": str(cache)}
    rows = []
    for attempt in ("first", "second"):
        db = work / f"{name}-{attempt}.duckdb"
        for step, cmd in (("ingest", [tracekit, "-q", "ingest", capture, "--db", str(db)]),
                          ("analyze", [tracekit, "-q", "analyze", "--db", str(db)])):
            seconds, mb, cpu = run_cpu(cmd, env)
            rows.append((step, attempt, seconds, mb, cpu))
            print(f"{name}: {step} ({attempt} run): {seconds:.2f} s, {cpu:.2f} CPU s",
                  file=sys.stderr)
        db.unlink()
    return rows


def main(argv=None):
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("capture", nargs="?", default=MIX)
    args.add_argument("--packets", type=int, default=440_000)
    args.add_argument("--control", action="store_true",
                      help="also a wheel built without the kernels compiled in")
    opts = args.parse_args(argv)
    before = load()
    with tempfile.TemporaryDirectory(prefix="tk-first-run-") as tmp:
        work = pathlib.Path(tmp)
        capture = str(work / "capture.pcap")
        subprocess.run(["editcap", "-r", opts.capture, capture, f"1-{opts.packets}"],
                       check=True)
        variants = [("with kernels", True)] + ([("without", False)] if opts.control else [])
        table = []
        for name, precompile in variants:
            tracekit = install(build_wheel(work, precompile), work / f"venv-{int(precompile)}")
            rows = two_runs(tracekit, capture, work, "pre" if precompile else "plain")
            by = {(s, a): (sec, mb, cpu) for s, a, sec, mb, cpu in rows}
            for step in ("ingest", "analyze"):
                first, second = by[(step, "first")], by[(step, "second")]
                table.append((name, step, first, second))
    after = load()
    print(f"{opts.packets:,} packets of {os.path.basename(opts.capture)}; load "
          f"{before[0]:.2f} before, {after[0]:.2f} after, {after[1]} cores\n")
    print("| wheel | step | first run s | CPU s | second run s | CPU s | first - second s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, step, first, second in table:
        print(f"| {name} | {step} | {first[0]:.2f} | {first[2]:.2f} | {second[0]:.2f} | "
              f"{second[2]:.2f} | {first[0] - second[0]:+.2f} |")


if __name__ == "__main__":
    main()
