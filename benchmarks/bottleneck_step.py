"""CPU seconds of the `bottleneck` step on an analysed store: the plain-SQL
form it had until #31 (tests/bottleneck_reference.sql, run as the SQL step
ran it) against the compiled pass (tracekit/pipeline/steps/bottleneck.py),
alternated in one process, and their rows compared (EXCEPT ALL both ways).

    PYTHONPATH=. python benchmarks/bottleneck_step.py STORE [CAPTURE_ID] [--rounds N]

STORE is written (the step's rows are rebuilt, a table bn_old is made and
dropped): use a copy. CPU seconds are time.process_time (DuckDB's threads
included), so a loaded machine moves them less than wall time.
"""

import argparse
import pathlib
import time

import duckdb

from tracekit.pipeline.steps import bottleneck

REFERENCE = pathlib.Path(__file__).resolve().parents[1] / "tests" / "bottleneck_reference.sql"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("capture_id", type=int, nargs="?", default=1)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    ref = REFERENCE.read_text()
    con = duckdb.connect(a.store)
    writer = con.cursor()

    def old():
        t0, w0 = time.process_time(), time.perf_counter()
        con.execute(f"CREATE OR REPLACE TABLE bn_old AS SELECT * FROM (\n{ref}\n)",
                    {"first": a.capture_id, "last": a.capture_id})
        return time.process_time() - t0, time.perf_counter() - w0

    def new():
        writer.execute("DELETE FROM bottleneck WHERE capture_id = ?", [a.capture_id])
        t0, w0 = time.process_time(), time.perf_counter()
        bottleneck.build(con, writer, a.capture_id)
        return time.process_time() - t0, time.perf_counter() - w0

    print("pass, first call (numba's import, the cached kernel): CPU %.2f s, wall %.2f s" % new())
    for r in range(a.rounds):
        print(f"round {r + 1}: SQL  CPU %.2f s, wall %.2f s" % old())
        print(f"round {r + 1}: pass CPU %.2f s, wall %.2f s" % new())
    cid = a.capture_id
    diff = [con.execute(q, [cid]).fetchall()[0][0] for q in (
        "SELECT count(*) FROM (FROM bottleneck WHERE capture_id = ? EXCEPT ALL FROM bn_old)",
        "SELECT count(*) FROM (FROM bn_old EXCEPT ALL FROM bottleneck WHERE capture_id = ?)",
        "SELECT count(*) FROM bn_old WHERE capture_id = ?")]
    print("rows only from the pass %d, only from the SQL %d, of %d" % tuple(diff))
    con.execute("DROP TABLE bn_old")


if __name__ == "__main__":
    main()
