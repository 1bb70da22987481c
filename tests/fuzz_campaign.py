"""A seeded mutation campaign over real captures and real logs: every mutant is
ingested and analysed, and each ends in exactly one of the outcomes below.

    python tests/fuzz_campaign.py [--captures 3000] [--logs 3000] [--seed 1]

prints the table docs/reliability.md quotes; tests/test_fuzz_campaign.py runs a
small campaign with the same checks. Outcomes:

- ingested: stored; whatever could not be decoded is counted (decode status,
  a read stop, malformed records) and every check below holds
- refused: one line naming the file (a TracekitError), nothing stored
- wrong data: stored, but a check failed (rows != records read, a wrapped or
  negative time or length, a time where the decode status says there is none)
- internal error: any other exception, in ingest or in analyze
- leaked: a thread or an open file left behind after the store was closed

Seeds: the samples in captures/ and the 27 third-party captures and the qlogs of
../shared (when present), plus tests/hostile_logs.py's good records.
"""

import argparse
import os
import random
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
SHARED = Path(os.environ.get("TRACEKIT_SHARED", ROOT.parent / "shared"))


def capture_seeds():
    paths = sorted((ROOT / "captures").glob("*.pcap*"))
    paths += sorted((SHARED / "captures").glob("*.pcap*"))
    return {p.name: p.read_bytes() for p in paths if p.stat().st_size < 2_000_000}


def log_seeds():
    seeds = {p.name: p.read_bytes() for p in sorted((ROOT / "captures").glob("*.jsonl"))
             if p.stat().st_size < 2_000_000}
    seeds.update({p.name: p.read_bytes() for p in sorted((SHARED / "logs").glob("*"))
                  if p.suffix in (".qlog", ".sqlog") and p.stat().st_size < 2_000_000})
    from hostile_logs import cases
    seeds.update({n: d for n, d in cases() if n.startswith(("csv_bom", "queqiao_msg_list"))})
    return seeds


def mutate(data, rng):
    raw = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0 or not raw:  # flip bytes
        for _ in range(rng.randint(1, 8)):
            if raw:
                raw[rng.randrange(len(raw))] = rng.randrange(256)
    elif kind == 1:  # cut
        raw = raw[:rng.randrange(len(raw) + 1)]
    elif kind == 2:  # repeat a slice
        a = rng.randrange(len(raw))
        b = min(len(raw), a + rng.randint(1, 2000))
        raw[a:a] = raw[a:b]
    elif kind == 3:  # delete a slice
        a = rng.randrange(len(raw))
        del raw[a:a + rng.randint(1, 200)]
    else:  # a field set to an extreme (lengths, times)
        a = rng.randrange(max(1, len(raw) - 8))
        raw[a:a + 8] = rng.choice([b"\xff" * 8, b"\x00" * 8, b"\x7f" + b"\xff" * 7,
                                   b"\x80" + b"\x00" * 7])
    return bytes(raw)


def _check_capture(con, capture_id):
    """Problems with a stored capture (empty when right)."""
    problems = []
    (rows, claimed, nulls, flagged, negative), = con.execute("""
        SELECT count(*), any_value(c.packets),
               count(*) FILTER (p.ts_ns IS NULL),
               count(*) FILTER (p.decode_status = 'timestamp_out_of_range'),
               count(*) FILTER (p.wire_bytes < 0 OR p.captured_bytes < 0 OR p.payload_bytes < 0)
        FROM packets p JOIN captures c USING (capture_id) WHERE capture_id = ?""",
        [capture_id]).fetchall()
    if rows != (claimed or 0):
        problems.append(f"{rows} rows, the capture says {claimed}")
    if nulls != flagged:
        problems.append(f"{nulls} NULL times, {flagged} flagged")
    if negative:
        problems.append(f"{negative} negative lengths")
    (bad_flow,), = con.execute("""
        SELECT count(*) FROM packets WHERE capture_id = ? AND flow_id IS NOT NULL
          AND decode_status IN ('timestamp_out_of_range', 'bad_tcp_header')""",
        [capture_id]).fetchall()
    if bad_flow:
        problems.append(f"{bad_flow} packets without a usable time or header in a flow")
    return problems


def run_one(kind, name, data, workdir):
    """(outcome, detail) for one mutant."""
    from tracekit.core.errors import TracekitError
    from tracekit.pipeline.analyze import analyze
    from tracekit.pipeline.captures import load_captures
    from tracekit.store.db import connect
    threads = threading.active_count()
    path = Path(workdir) / name
    path.write_bytes(data)
    db = Path(workdir) / "s.duckdb"
    for leftover in (db, Path(str(db) + ".wal")):
        if leftover.exists():
            leftover.unlink()
    con = connect(db)
    try:
        try:
            if kind == "capture":
                (summary,) = load_captures(con, [path])
                stored = summary.capture_id
            else:
                from tracekit.pipeline.logs import load_logs
                from tracekit.readers.events import read_log
                (summary,) = load_logs(con, [read_log(str(path))])
                stored = None
        except TracekitError as e:
            text = str(e)
            if "\n" in text or (str(path) not in text and name not in text):
                return "wrong data", f"error not one line naming the file: {text[:200]}"
            return "refused", text[:120]
        problems = _check_capture(con, stored) if stored is not None else []
        analyze(con)
        if problems:
            return "wrong data", "; ".join(problems)
        return "ingested", ""
    except Exception as e:  # noqa: BLE001 - this is what the campaign counts
        return "internal error", f"{type(e).__name__}: {str(e)[:200]}"
    finally:
        con.close()
        path.unlink()
        if threading.active_count() > threads:
            return "leaked", f"{threading.active_count() - threads} threads"  # noqa: B012


def campaign(captures, logs, seed=1, out=None):
    rng = random.Random(seed)
    results = {"capture": Counter(), "log": Counter()}
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, n, seeds in (("capture", captures, capture_seeds()), ("log", logs, log_seeds())):
            names = sorted(seeds)
            for i in range(n):
                name = rng.choice(names)
                mutant = mutate(seeds[name], rng)
                outcome, detail = run_one(kind, name, mutant, tmp)
                results[kind][outcome] += 1
                if outcome in ("wrong data", "internal error", "leaked"):
                    failures.append((kind, name, i, outcome, detail))
                if out and (i + 1) % 250 == 0:
                    print(f"{kind}: {i + 1}/{n}", file=out)
    return results, failures


def table(results):
    cols = ["ingested", "refused", "wrong data", "internal error", "leaked"]
    lines = ["| input | mutants | " + " | ".join(cols) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in cols) + " |"]
    for kind, counts in results.items():
        lines.append(f"| {kind}s | {sum(counts.values()):,} | "
                     + " | ".join(f"{counts.get(c, 0):,}" for c in cols) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captures", type=int, default=3000)
    ap.add_argument("--logs", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    results, failures = campaign(a.captures, a.logs, a.seed, out=sys.stderr)
    print(table(results))
    for f in failures[:20]:
        print(*f, sep="  ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
