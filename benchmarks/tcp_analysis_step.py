"""Where the `tcp_analysis` step's CPU goes, and what narrowing its table would save.

    PYTHONPATH=. python benchmarks/tcp_analysis_step.py INGESTED_STORE [MODE ...] [--rounds N]

Each MODE runs the step (tracekit/pipeline/steps/sequence.py) alone, in a
process of its own, on a fresh copy of INGESTED_STORE (a store that was only
ingested; it is never written), under analyze's settings, and prints its CPU
seconds (time.process_time: DuckDB's threads included), peak RSS, the store's
size and the thread time of each phase (reading packets, the two kernels,
building Arrow, the writer thread's appends). Modes:

- `full`: the step as it is;
- `nowrite`: nothing appended (what reading and the kernels cost);
- `nodense`: all but `store.tcp_analysis` appended (flights, exchanges, events);
- `drop:COL,COL`: `store.tcp_analysis` without those columns (what writing
  them costs: an upper bound of what moving them out of the table saves, since
  the view would then have to get them elsewhere, on every read);
- `set:NAME=VALUE`: the step as it is under a DuckDB setting (e.g.
  `set:force_compression=uncompressed`: what choosing a compression costs).

Modes alternate round by round. On the 2.86 M-packet mixed capture (#31):
full 5.8-5.9 CPU s, nowrite ~2.0, without the 5 columns that copy `packets`
-0.5 s, without the 7 ACK facts -1.0 s.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import os, resource, shutil, sys, time
import duckdb
from tracekit.core.jit import prefer_compiled
from tracekit.pipeline import analyze as an
from tracekit.pipeline.steps import sequence as sq
from tracekit.store import writer as wr
from tracekit.store.db import settings
src, db, mode = sys.argv[1:4]
shutil.copy(src, db)
con = duckdb.connect(db)
an.create_capture_tables(con)
phases = {}
def timed(name, f):
    def g(*a, **k):
        t0 = time.thread_time()
        try:
            return f(*a, **k)
        finally:
            phases[name] = phases.get(name, 0) + time.thread_time() - t0
    return g
for n in ("read_chunk", "copies", "tcp_analysis_tables", "flights_table", "exchanges_table"):
    setattr(sq, n, timed(n, getattr(sq, n)))
sq.ws.analyze = timed("wireshark kernel", sq.ws.analyze)
sq.sg.classify = timed("segments kernel", sq.sg.classify)
wr.AppendWriter._take = timed("writer thread", wr.AppendWriter._take)
put = wr.AppendWriter.put
if mode == "nowrite":
    wr.AppendWriter.put = lambda self, t, tab: None
    sq._apply_late = lambda *a: None
elif mode == "nodense":
    wr.AppendWriter.put = lambda self, t, tab: None if t == "tcp_analysis" else put(self, t, tab)
elif mode.startswith("drop:"):
    drop = set(mode[5:].split(","))
    sq.DENSE = tuple(c for c in sq.DENSE if c.name not in drop)
    con.execute("DROP VIEW tcp_analysis; DROP TABLE store.tcp_analysis")
    con.execute("CREATE TABLE store.tcp_analysis ("
                + ", ".join(f"{c.name} {c.sql}" for c in sq.DENSE) + ")")
if mode.startswith("set:"):
    name, value = mode[4:].split("=")
    con.execute(f"SET {name} = '{value}'")
prefer_compiled(10 ** 9)
step = an.CodeStep(sq)
c0 = time.process_time()
with settings(con, memory_limit=an.ANALYZE_MEMORY_LIMIT, checkpoint_threshold="16GB"), \
        settings(con, preserve_insertion_order=False):
    step.build_one(con, con.cursor(), 1, "benchmark")
con.execute("CHECKPOINT")
cpu = time.process_time() - c0
con.close()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{mode[:40]}: {cpu:.2f} CPU s, peak RSS {rss:.0f} MB, store {os.path.getsize(db) / 1e6:.0f} MB")
print("   " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("modes", nargs="*", default=["full", "nowrite", "nodense"])
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tcp_analysis_step-")
    try:
        for _ in range(a.rounds):
            for mode in a.modes:
                db = os.path.join(work, "step.duckdb")
                subprocess.run([sys.executable, "-c", CHILD, a.store, db, mode], check=True)
                os.remove(db)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
