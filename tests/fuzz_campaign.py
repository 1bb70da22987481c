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
import struct
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


def _blocks(data):
    """[(offset, type, length, byte order)] of a pcapng file's blocks, as far as
    their lengths hold."""
    out, pos, e = [], 0, "<"
    while pos + 12 <= len(data):
        if data[pos:pos + 4] == b"\x0a\x0d\x0d\x0a":  # a section header: its own byte order
            e = "<" if data[pos + 8:pos + 12] == b"\x4d\x3c\x2b\x1a" else ">"
        btype, blen = struct.unpack_from(e + "II", data, pos)
        if blen < 12 or blen % 4 or pos + blen > len(data):
            break
        out.append((pos, btype, blen, e))
        pos += blen
    return out


def mutate_blocks(data, rng):
    """A structural edit of a pcapng file: a packet's interface id, a block's
    length field, an interface description removed (its packets then name an
    interface no IDB described), or a section of the other byte order (with
    an if_tsoffset taking its times before 1970) inserted mid-file."""
    from pcapgen import epb, idb, shb
    blocks = _blocks(data)
    if not blocks:
        return mutate(data, rng)
    raw = bytearray(data)
    pos, btype, blen, e = rng.choice(blocks)
    kind = rng.randrange(4)
    packets = [b for b in blocks if b[1] in (3, 6)]
    if kind == 0 and packets:
        pos, btype, blen, e = rng.choice([b for b in packets if b[1] == 6] or packets)
        if btype == 6:
            value = rng.choice([1, 2, 7, 0xFFFF, 0xFFFFFFFF, rng.randrange(1 << 32)])
            struct.pack_into(e + "I", raw, pos + 8, value)
    elif kind == 1:
        at = rng.choice([pos + 4, pos + blen - 4])
        value = rng.choice([0, 4, 12, blen - 4, blen + 4, 0x7FFFFFFF, 0xFFFFFFFF])
        struct.pack_into(e + "I", raw, at, value & 0xFFFFFFFF)
    elif kind == 2:
        idbs = [b for b in blocks if b[1] == 1]
        if idbs:
            pos, _, blen, _ = rng.choice(idbs)
            del raw[pos:pos + blen]
    else:
        other = ">" if e == "<" else "<"
        packet = bytes(range(60))
        section = (shb(other) + idb(1, tsresol=6, tsoffset=-2_000_000_000, e=other)
                   + epb(0, 10**15, packet, e=other) + epb(0, 10**15 + 1000, packet, e=other))
        raw[pos:pos] = section
    return bytes(raw)


def _check_capture(con, capture_id):
    """Problems with a stored capture (empty when right)."""
    problems = []
    (rows, claimed, nulls, flagged, negative), = con.execute("""
        SELECT count(*), any_value(c.packets),
               count(*) FILTER (p.ts_ns IS NULL),
               count(*) FILTER (p.decode_status IN ('timestamp_out_of_range',
                                                    'no_such_interface')),
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
    (first, last, lo, hi), = con.execute("""
        SELECT any_value(c.first_ts_ns), any_value(c.last_ts_ns), min(p.ts_ns), max(p.ts_ns)
        FROM captures c LEFT JOIN packets p USING (capture_id) WHERE capture_id = ?""",
        [capture_id]).fetchall()
    if (first, last) != (lo, hi):
        problems.append(f"the capture spans {first}..{last}, its packets {lo}..{hi}")
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
                structural = (kind == "capture" and seeds[name][:4] == b"\x0a\x0d\x0d\x0a"
                              and rng.random() < 0.5)
                mutant = (mutate_blocks if structural else mutate)(seeds[name], rng)
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
