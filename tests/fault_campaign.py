"""Fault campaign: kill -9, or a full disk, at every step of `tracekit analyze`.

For each analysis step S (per capture and store-wide) and each fault, a
store that was analysed, then given one more capture and log (so every
per-capture step runs and every store-wide table is rebuilt), is analysed in a process that meets the fault right after S
has written: killed with SIGKILL (once S's rows are written, the process
holds there), or S's write raises DuckDB's "No space left on device". Then:

- before the store is reopened, readers see no `*__building` table and the
  store-wide tables of the last complete run, all of them (no mix of runs);
- a full disk ends in exit 2 and one line;
- the next `tracekit analyze` brings every derived table to the same rows as
  a store analysed without a fault.

    python tests/fault_campaign.py            # every step, both faults: its table
    python tests/fault_campaign.py --random 40 --seed 1
        # kill -9 at 40 random points of the same analyze instead: the k-th
        # call of a tracekit function, k drawn uniformly over the calls a
        # fault-free analyze makes (counted in this run); a state, not a time
        # (a point after the commit leaves the new run's tables: both right)
"""

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
TRACEKIT = [sys.executable, "-m", "tracekit.cli"]
INPUTS = [ROOT / "captures" / "streaming-stalls-client.pcap",
          ROOT / "captures" / "streaming-stalls-client-events.jsonl"]
MORE_CAPTURE = ROOT / "captures" / "http-fresh-vs-persistent.pcap"
MORE = ('{"ts_ns": 1700000000000000000, "kind": "request_start", "request": "x1"}\n'
        '{"ts_ns": 1700000000050000000, "kind": "request_end", "request": "x1"}\n')

# the fault, met right after step argv[2] has written (argv[1]: the flag file)
HOOK = """
import sys, threading
from pathlib import Path
import duckdb
from tracekit.pipeline import stepkinds
flag, table, fault = Path(sys.argv.pop(1)), sys.argv.pop(1), sys.argv.pop(1)
def wrap(cls, name):
    real = getattr(cls, name)
    def hooked(self, *args):
        out = real(self, *args)
        if self.table == table:
            if fault == "full":
                raise duckdb.IOException('Could not write file "x": No space left on device')
            flag.touch()
            threading.Event().wait()
        return out
    setattr(cls, name, hooked)
wrap(stepkinds.SqlStep, "write")
wrap(stepkinds.StoreStep, "write_all")
wrap(stepkinds.PartitionedStoreStep, "write_all")
wrap(stepkinds.CodeStoreStep, "write_all")
wrap(stepkinds.CodeStep, "build_one")
from tracekit.cli import main
main()
"""


def tables_state(db):
    """{table: (rows, digest)} of every table readers see, and the `__building` ones."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        names = [r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_name NOT IN ('analysis_runs', 'analyses_in_progress', "
            "'ingests_in_progress', 'captures', 'event_logs') ORDER BY 1").fetchall()]
        return {n: con.execute(f"SELECT count(*), sum(hash(t::VARCHAR)) FROM {n} t").fetchone()
                for n in names}
    finally:
        con.close()


def steps():
    from tracekit.pipeline.analyze import _steps
    return [s.table for s in _steps() if s.scope != "view"]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def next_run(db, after):
    """Problems of the next `tracekit analyze` of `db`: it fails, or its tables
    differ from a store analysed without a fault (`after`)."""
    r = run(TRACEKIT + ["analyze", "--db", str(db)])
    if r.returncode != 0:
        return [f"the next analyze: exit {r.returncode}: {r.stderr.strip()[-200:]}"]
    now = tables_state(db)
    diff = sorted(n for n in after if now.get(n) != after[n])
    return [f"the next analyze differs from a clean one in {diff}"] if now != after else []


def one(base, work, table, fault, after):
    """Problems (empty when right) for one fault at one step."""
    db = work / "s.duckdb"
    shutil.copy(base, db)
    log = work / "more.jsonl"
    log.write_text(MORE)
    run(TRACEKIT + ["ingest", str(log), str(MORE_CAPTURE), "--db", str(db)], check=True)
    before = tables_state(db)
    flag = work / "flag"
    flag.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", HOOK, str(flag), table, fault, "analyze",
                             "--db", str(db)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    problems = []
    if fault == "kill":
        deadline = time.monotonic() + 600  # a safety net, not a synchronisation
        while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not flag.exists():
            proc.kill()
            return [f"never reached ({(proc.communicate()[1] or '').strip()[-200:]})"]
        proc.kill()
        proc.communicate()
    else:
        err = proc.communicate(timeout=600)[1]
        if proc.returncode != 2 or len(err.strip().splitlines()) != 1:
            problems.append(f"exit {proc.returncode}: {err.strip()[-200:]}")
    seen = tables_state(db)
    if any(n.endswith("__building") for n in seen):
        problems.append("a half-built table is visible")
    store_wide = [n for n in ("requests", "bounds", "request_phases", "attribution")]
    if {n: seen.get(n) for n in store_wide} != {n: before.get(n) for n in store_wide}:
        problems.append("the store-wide tables are not those of the last complete run")
    problems += next_run(db, after)
    return problems


# the process holds at the argv[2]-th call of a tracekit function (0: never;
# the count is then written to the flag file argv[1] at exit)
HOOK_AT = """
import sys, threading
from pathlib import Path
import tracekit
flag, at = Path(sys.argv.pop(1)), int(sys.argv.pop(1))
package = str(Path(tracekit.__file__).parent)
calls = [0]
def count(frame, event, arg):
    if event == "call" and frame.f_code.co_filename.startswith(package):
        calls[0] += 1
        if calls[0] == at:
            flag.touch()
            threading.Event().wait()
sys.setprofile(count)
threading.setprofile(count)
from tracekit.cli import main
try:
    main()
finally:
    if not at:
        flag.write_text(str(calls[0]))
"""


def at_call(base, work, at, after, before):
    """(how it ended, problems: empty when right) for kill -9 at the `at`-th call."""
    db = work / "s.duckdb"
    shutil.copy(base, db)
    flag = work / "flag"
    proc = subprocess.Popen([sys.executable, "-c", HOOK_AT, str(flag), str(at), "analyze",
                             "--db", str(db)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 900  # a safety net, not a synchronisation
    while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    ended = "killed" if flag.exists() else f"it ended first (exit {proc.poll()})"
    proc.kill()
    proc.communicate()
    problems = []
    seen = tables_state(db)
    if any(n.endswith("__building") for n in seen):
        problems.append("a half-built table is visible")
    store_wide = ("requests", "bounds", "request_phases", "attribution")
    now = {n: seen.get(n) for n in store_wide}
    if now not in ({n: before.get(n) for n in store_wide}, {n: after.get(n) for n in store_wide}):
        problems.append("the store-wide tables are a mix of two runs")
    problems += next_run(db, after)
    return ended, problems


def random_campaign(n, seed):
    """([(call, how it ended, problems)], calls of a fault-free analyze) for `n`
    kills at random points."""
    out = []
    draw = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = tmp / "base.duckdb"
        run(TRACEKIT + ["ingest", *map(str, INPUTS), "--db", str(base)], check=True)
        run(TRACEKIT + ["analyze", "--db", str(base)], check=True)
        (tmp / "more.jsonl").write_text(MORE)
        run(TRACEKIT + ["ingest", str(tmp / "more.jsonl"), str(MORE_CAPTURE), "--db", str(base)],
            check=True)
        before = tables_state(base)
        ref = tmp / "ref.duckdb"
        shutil.copy(base, ref)
        counted = tmp / "calls"
        run([sys.executable, "-c", HOOK_AT, str(counted), "0", "analyze", "--db", str(ref)],
            check=True)
        calls = int(counted.read_text())
        after = tables_state(ref)
        for k in range(n):
            at = draw.randint(1, calls)
            work = tmp / f"r{k}"
            work.mkdir()
            out.append((at, *at_call(base, work, at, after, before)))
            shutil.rmtree(work)
    return out, calls


def campaign(only=None, faults=("kill", "full")):
    """[(step, fault, problems)]."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = tmp / "base.duckdb"
        run(TRACEKIT + ["ingest", *map(str, INPUTS), "--db", str(base)], check=True)
        run(TRACEKIT + ["analyze", "--db", str(base)], check=True)
        ref = tmp / "ref.duckdb"
        shutil.copy(base, ref)
        (tmp / "more.jsonl").write_text(MORE)
        run(TRACEKIT + ["ingest", str(tmp / "more.jsonl"), str(MORE_CAPTURE), "--db", str(ref)],
            check=True)
        run(TRACEKIT + ["analyze", "--db", str(ref)], check=True)
        after = tables_state(ref)
        for table in only or steps():
            for fault in faults:
                work = tmp / f"{table}-{fault}"
                work.mkdir()
                out.append((table, fault, one(base, work, table, fault, after)))
                shutil.rmtree(work)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", nargs="*", help="only these steps (default: every one)")
    ap.add_argument("--random", type=int, metavar="N", help="kill -9 at N random points instead")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.random:
        results, calls = random_campaign(a.random, a.seed)
        print(f"a fault-free analyze makes {calls:,} calls of tracekit functions; kill -9 at "
              f"{a.random} of them drawn uniformly (seed {a.seed})\n\n"
              f"| at call | the process | problems |\n| ---: | --- | --- |")
        for at, ended, problems in sorted(results):
            print(f"| {at:,} | {ended} | {'; '.join(problems) or 'ok'} |")
        return 1 if any(p for _, _, p in results) else 0
    results = campaign(a.steps)
    print("| step | kill -9 | disk full |\n| --- | --- | --- |")
    by = {}
    for table, fault, problems in results:
        by.setdefault(table, {})[fault] = "; ".join(problems) or "ok"
    for table, cells in by.items():
        print(f"| {table} | {cells.get('kill', '-')} | {cells.get('full', '-')} |")
    return 1 if any(p for _, _, p in results) else 0


if __name__ == "__main__":
    sys.exit(main())
