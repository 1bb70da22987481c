"""Fault campaign, ingest: kill -9, or a full disk, at each point of `tracekit ingest`.

A store that holds an ingested and analysed capture and log is given one
more capture and log by an ingest that meets the fault at one point:

- marker: once the call's capture ids are listed in `ingests_in_progress`;
- packets: amid the packets (after the second of many appends: the child
  appends in small groups so that there is a middle);
- flows: after packets were appended, before the first append of flows;
- capture_row: in the final transaction, once the `captures` and
  `interfaces` rows are written (not yet committed);
- event_log: in the same transaction, once the event log's rows are written;
- commit: once the final transaction committed (before the command returns).

kill -9: the process holds at the point (it touched a flag file) until the
parent kills it -- the parent waits for the flag, never for a time. Full
disk: DuckDB's "No space left on device" is raised at the point. Then:

- readers see the store as before the ingest (captures, interfaces,
  packets, flows, events, event_logs: rows and digest), or, at `commit`,
  as after it -- never part of a capture;
- a full disk before the commit ends in exit 2 and one line;
- the next ingest of the same files leaves every table (the stored ones
  under the views too) with the rows of a store ingested without a fault.

    python tests/ingest_fault_campaign.py     # every point, both faults: its table
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from fault_inputs import BASE, MORE, TRACEKIT

POINTS = ("marker", "packets", "flows", "capture_row", "event_log", "commit")

HOOK = """
import sys, threading
from pathlib import Path
import duckdb
from tracekit.pipeline import logs, staging
from tracekit.store import writer
flag, point, fault = Path(sys.argv.pop(1)), sys.argv.pop(1), sys.argv.pop(1)
staging.INSERT_ROWS, staging.GATHER_ROWS = 1024, 512  # many appends: a middle to fault in
def meet(here):
    if here != point:
        return
    if fault == "full":
        raise duckdb.IOException('Could not write file "x": No space left on device')
    flag.touch()
    threading.Event().wait()
appended = {"packets": 0}
real_append = writer.append
def append(con, table, rows):
    if table == "flows":
        meet("flows")
    real_append(con, table, rows)
    if table == "packets" and rows.num_rows:
        appended["packets"] += 1
        if appended["packets"] == 2:
            meet("packets")
writer.append = append
def after(owner, name, here):
    real = getattr(owner, name)
    def hooked(*args, **kwargs):
        out = real(*args, **kwargs)
        meet(here)
        return out
    setattr(owner, name, hooked)
after(staging.Run, "__init__", "marker")
after(staging, "_insert_finals", "capture_row")
after(logs, "store_logs", "event_log")
after(staging.Command, "commit", "commit")
from tracekit.cli import main
main()
"""

SEEN = ("captures", "interfaces", "packets", "flows", "events", "event_logs")


def state(db, tables=None):
    """{table: (rows, digest)}: the tables readers see (`SEEN`), or every table
    of the store, the stored ones under the views included (`tables="all"`);
    columns of times the store sets (ingested_at) left out of the digest."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        if tables == "all":
            names = con.execute(
                "SELECT table_schema || '.' || table_name FROM information_schema.tables "
                "WHERE table_type = 'BASE TABLE' ORDER BY 1").fetchall()
            names = [n for n, in names]
        else:
            names = list(SEEN)
        out = {}
        for name in names:
            schema, _, table = name.rpartition(".")
            cols = [c for c, t in con.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = ? AND table_schema = ?",
                [table, schema or "main"]).fetchall() if not t.startswith("TIMESTAMP")]
            row = ", ".join(f'"{c}"' for c in cols) or "1"
            out[name] = con.execute(f"SELECT count(*), sum(hash(({row})::VARCHAR)) "
                                    f"FROM {name}").fetchone()
        return out
    finally:
        con.close()


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def ingest(db, files, check=True):
    return run(TRACEKIT + ["ingest", *map(str, files), "--db", str(db)], check=check)


def meet_fault(cmd, flag, fault):
    """Run `cmd` (the hooked child) to its fault: [problems], stderr."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if fault == "kill":
        deadline = time.monotonic() + 600  # a safety net, not a synchronisation
        while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        reached = flag.exists()
        proc.kill()
        err = proc.communicate()[1] or ""
        return ([] if reached else [f"never reached ({err.strip()[-200:]})"]), err
    err = proc.communicate(timeout=600)[1]
    return [] if proc.returncode == 2 else [f"exit {proc.returncode}: {err.strip()[-200:]}"], err


def one(base, work, point, fault, before, after, after_all):
    """Problems (empty when right) for one fault at one ingest point."""
    db = work / "s.duckdb"
    shutil.copy(base, db)
    flag = work / "flag"
    problems, err = meet_fault([sys.executable, "-c", HOOK, str(flag), point, fault, "ingest",
                                *map(str, MORE), "--db", str(db)], flag, fault)
    if problems:
        return problems
    if fault == "full" and len(err.strip().splitlines()) != 1:
        problems.append(f"not one line: {err.strip()[-200:]}")
    if fault == "full" and ("they are in the store" in err) != (point == "commit"):
        problems.append(f"the message misstates what is in the store: {err.strip()[-200:]}")
    seen = state(db)
    expected = after if point == "commit" else before
    if seen != expected:
        diff = sorted(n for n in SEEN if seen.get(n) != expected.get(n))
        problems.append(f"readers see {'part of' if seen != after else 'all of'} the ingest "
                        f"(differs from {'after' if point == 'commit' else 'before'} in {diff})")
    r = ingest(db, MORE, check=False)
    if r.returncode != 0:
        problems.append(f"the next ingest: exit {r.returncode}: {r.stderr.strip()[-200:]}")
    else:
        now = state(db, "all")
        if now != after_all:
            diff = sorted(n for n in set(now) | set(after_all) if now.get(n) != after_all.get(n))
            problems.append(f"the next ingest differs from a clean one in {diff}")
    return problems


def campaign(points=POINTS, faults=("kill", "full")):
    """[(point, fault, problems)]."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = tmp / "base.duckdb"
        ingest(base, BASE)
        run(TRACEKIT + ["analyze", "--db", str(base)], check=True)
        before = state(base)
        ref = tmp / "ref.duckdb"
        shutil.copy(base, ref)
        ingest(ref, MORE)
        after, after_all = state(ref), state(ref, "all")
        for point in points:
            for fault in faults:
                work = tmp / f"{point}-{fault}"
                work.mkdir()
                out.append((point, fault, one(base, work, point, fault, before, after,
                                              after_all)))
                shutil.rmtree(work)
    return out


def table(results):
    """The campaign's markdown table."""
    lines = ["| ingest point | kill -9 | disk full |", "| --- | --- | --- |"]
    by = {}
    for point, fault, problems in results:
        by.setdefault(point, {})[fault] = "; ".join(problems) or "ok"
    lines += [f"| {p} | {c.get('kill', '-')} | {c.get('full', '-')} |" for p, c in by.items()]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", nargs="*", choices=POINTS, help="only these (default: all)")
    a = ap.parse_args()
    results = campaign(a.points or POINTS)
    print(table(results))
    return 1 if any(p for _, _, p in results) else 0


if __name__ == "__main__":
    sys.exit(main())
