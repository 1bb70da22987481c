"""Time `tracekit ingest` of a 1-million-event JSON Lines log against the floor
and a naive reader on the same file.

    python benchmarks/events.py [benchmarks/data/events-1m.jsonl] [--runs 3]

The log is made first if absent (benchmarks/data, not committed): one
million events of tracekit's schema as the streaming and serving workloads
write them (chunk_generated/sent/arrived, playback_callback, token), half
with ns timestamps and half RFC 3339, about 150 bytes each. Each tool runs
as its own process on the warm file:

- tracekit: `tracekit ingest LOG --db fresh.duckdb` (parse, validate every
  record, normalise, store; the whole command);
- DuckDB read_json: `CREATE TABLE t AS SELECT * FROM read_json(LOG)` in a
  fresh database -- DuckDB's own JSON reader into a table, no validation of
  tracekit's schema, no line numbers: the floor;
- Python json: json.loads of every line and a dict per event -- what a
  straightforward Python ingester would spend before writing anything.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "data", "events-1m.jsonl")
BASE = 1_800_000_000_000_000_000


def make(path, n=1_000_000):
    rng = random.Random(1)
    kinds = ["chunk_generated", "chunk_sent", "chunk_arrived", "playback_callback", "token"]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for i in range(n):
            ts = BASE + i * 1_000_000 + rng.randrange(1000)
            kind = kinds[i % len(kinds)]
            rec = {"ts": ts, "kind": kind, "run": f"r{i // 100_000}", "stream": f"s{i // 5000}",
                   "request": f"q{i // 5000}"}
            if i % 2:
                s, ns = divmod(ts, 1_000_000_000)
                rec["ts"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + f".{ns:09d}Z"
            if kind == "playback_callback":
                rec.update(requested_frames=480, delivered_frames=480, sample_rate=24000)
            else:
                rec.update(seq=i // 5, bytes=968)
            f.write(json.dumps(rec) + "\n")


def timed(cmd):
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"{cmd[:3]} failed:\n{proc.stderr}")
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", nargs="?", default=DEFAULT)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    if not os.path.exists(a.log):
        print(f"making {a.log} ...", file=sys.stderr)
        make(a.log)
    with open(a.log, "rb") as f:  # warm the page cache
        lines = sum(1 for _ in f)
    tracekit = [os.path.join(os.path.dirname(sys.executable), "tracekit")]
    if not os.path.exists(tracekit[0]):
        tracekit = [sys.executable, "-m", "tracekit.cli"]
    results = {}
    for _ in range(a.runs):
        with tempfile.TemporaryDirectory() as d:
            results.setdefault("tracekit ingest", []).append(
                timed(tracekit + ["ingest", a.log, "--db", os.path.join(d, "t.duckdb")]))
            results.setdefault("DuckDB read_json (floor)", []).append(timed([
                sys.executable, "-c",
                "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
                "c.execute(\"CREATE TABLE t AS SELECT * FROM read_json(?)\", [sys.argv[2]])",
                os.path.join(d, "f.duckdb"), a.log]))
            results.setdefault("Python json.loads per line", []).append(timed([
                sys.executable, "-c",
                "import json, sys\nrows = [json.loads(l) for l in open(sys.argv[1])]",
                a.log]))
    size = os.path.getsize(a.log) / 1e6
    print(f"{a.log}: {lines:,} events, {size:,.0f} MB; best of {a.runs} runs")
    best = {k: min(v) for k, v in results.items()}
    ours = best["tracekit ingest"]
    for name, s in best.items():
        ratio = s / ours
        print(f"  {name:30s} {s:7.2f} s  {lines / s:>12,.0f} events/s  {ratio:5.2f}x tracekit's time")


if __name__ == "__main__":
    main()
