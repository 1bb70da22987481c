"""What a column of `packets` costs ingest, and what a narrower table would save (#31).

    python benchmarks/packets_columns.py benchmarks/data/kernel-tcp-mix-128.pcap [--rounds 3]

Three measurements, each printed as a Markdown table (in the order 2, 3, 1:
the heavy modules are imported after the timed processes ran, so that none
of them is forked from a large parent):

1. DuckDB's append per column, by content: 245,760 rows (two row groups) of
   20 BIGINT columns that are random, all NULL or all 0, and of 20
   `UINTEGER[]` columns all NULL, appended from Arrow into a new file by one
   thread and checkpointed; milliseconds per column (best of 3); and
   MAP(UTINYINT, BIGINT) columns (the rare fields packed as one: on 5 %
   of the rows with 4 entries, on every row with 1 or 5). And three
   ways of adding 20 NULL columns to 20 random ones (Arrow NULLs, the
   columns left to their default, NULL in the SELECT): what each NULL
   column adds. Whether a column holds anything barely changes its cost.
2. `tracekit ingest` of CAPTURE as it is, against the same ingest with the
   columns that are NULL on nearly every packet of a TCP/IPv4 capture
   (RARE) left out of `packets` (its schema patched in the child process:
   what a `packets` without them would cost, not a working store), and
   `tcptrace -l -r`, whole processes, alternated, medians.
3. What such a split costs its readers: a full scan of one column of
   `store.packets` against the same scan through a view that LEFT JOINs a
   side table holding the RARE columns of the packets that have any (what
   `tcp_analysis` does with `tcp_events`; DuckDB 2.0 does not drop an
   unused LEFT JOIN from a view), best of 5, in an ingested store.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

from common import alternate, compile_kernels, load, medians, run_cpu, tracekit_command, warm

RARE = ("decode_status", "vlan_outer", "vlan_inner", "ipv6_flow_label", "ipv6_ext_headers",
        "tcp_mss", "tcp_wscale", "tcp_sack_left", "tcp_sack_right", "udp_length", "quic_type",
        "quic_version", "quic_dcid_len", "quic_scid_len")

# the child: tracekit's CLI, with `packets` narrowed first when NARROW is set
CHILD = r"""
import os, sys
if os.environ.get("NARROW"):
    import pyarrow as pa
    import tracekit.store.schema as sc
    import tracekit.pipeline.staging as st
    rare = set(os.environ["NARROW"].split(","))
    sc.TABLES["packets"] = tuple(c for c in sc.TABLES["packets"] if c.name not in rare)
    st.GATHERED["packets"] = pa.schema([f for f in st.GATHERED["packets"] if f.name not in rare])
from tracekit.cli import main
sys.argv[0] = "tracekit"
main(prog_name="tracekit")
"""


def append_costs(rows=2 * 122_880, width=20):
    """{content: ms per column} of appending `rows` rows."""
    import numpy as np  # (imported here: a child forked from a large parent counts its pages)
    import pyarrow as pa

    rng = np.random.default_rng(31)
    tables = {
        "BIGINT, random": (pa.table({f"c{i}": rng.integers(0, 1 << 40, rows) for i in range(width)}),
                           "BIGINT"),
        "BIGINT, all NULL": (pa.table({f"c{i}": pa.nulls(rows, pa.int64()) for i in range(width)}),
                             "BIGINT"),
        "BIGINT, all 0": (pa.table({f"c{i}": np.zeros(rows, np.int64) for i in range(width)}),
                          "BIGINT"),
        "UINTEGER[], all NULL": (pa.table({f"c{i}": pa.nulls(rows, pa.list_(pa.uint32()))
                                           for i in range(width)}), "UINTEGER[]"),
    }
    for share, entries in ((0.05, 4), (1.0, 1), (1.0, 5)):  # the rare fields as one MAP
        has = rng.random(rows) < share
        offsets = np.zeros(rows + 1, np.int32)
        np.cumsum(np.where(has, entries, 0), out=offsets[1:])
        valid = pa.py_buffer(np.packbits(np.append(has, True), bitorder="little"))
        maps = pa.MapArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), rows + 1, [valid, pa.py_buffer(offsets)]),
            pa.array(np.tile(np.arange(entries, dtype=np.uint8), int(has.sum()))),
            pa.array(rng.integers(0, 1 << 32, int(offsets[-1]))))
        tables[f"MAP(UTINYINT, BIGINT), {share:.0%} of rows, {entries} entries"] = (
            pa.table({f"c{i}": maps for i in range(width)}), "MAP(UTINYINT, BIGINT)")
    out = {}
    work = tempfile.mkdtemp(prefix="packets_columns-")
    try:
        out.update(_null_ways(work, rows, width, rng))
        for name, (table, sql_type) in tables.items():
            columns = [f"c{i} {sql_type}" for i in range(width)]
            out[name] = _best_append(work, columns, table) * 1e3 / width
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _null_ways(work, rows, width, rng):
    """{way: ms per NULL column}: `width` random BIGINT columns appended with
    `width` more that are NULL, given as Arrow NULLs, left to their default
    or written as NULL in the SELECT, less the random columns alone."""
    import pyarrow as pa

    dense = {f"d{i}": rng.integers(0, 1 << 40, rows) for i in range(width)}
    nulls = {f"n{i}": pa.nulls(rows, pa.int64()) for i in range(width)}
    names = ", ".join(dense)
    ways = {
        "alone": (pa.table(dense), 0, "INSERT INTO t SELECT * FROM rows_in"),
        "BIGINT, all NULL, beside them": (pa.table({**dense, **nulls}), width,
                                          "INSERT INTO t SELECT * FROM rows_in"),
        "BIGINT, left to its default NULL": (pa.table(dense), width,
                                             f"INSERT INTO t ({names}) SELECT * FROM rows_in"),
        "BIGINT, NULL in the SELECT": (pa.table(dense), width, "INSERT INTO t SELECT *, "
                                       + ", ".join(["NULL::BIGINT"] * width) + " FROM rows_in"),
    }
    best = {way: _best_append(work, [f"{c} BIGINT" for c in dense]
                              + [f"n{i} BIGINT" for i in range(extra)], table, sql)
            for way, (table, extra, sql) in ways.items()}
    return {way: (t - best["alone"]) * 1e3 / width for way, t in best.items() if way != "alone"}


def _best_append(work, columns, table, sql="INSERT INTO t SELECT * FROM rows_in"):
    """Seconds (best of 3) to append Arrow `table` by `sql` into a new file's
    table t (`columns`: its column definitions), one thread, checkpointed."""
    import duckdb

    best = float("inf")
    for _ in range(3):
        path = os.path.join(work, "a.duckdb")
        con = duckdb.connect(path)
        con.execute("SET threads = 1; SET preserve_insertion_order = false")
        con.execute(f"CREATE TABLE t ({', '.join(columns)})")
        con.register("rows_in", table)
        started = time.perf_counter()
        con.execute(sql)
        con.execute("CHECKPOINT")
        best = min(best, time.perf_counter() - started)
        con.close()
        os.remove(path)
    return best


def read_costs(store):
    """(ms of a scan of store.packets, ms of the same through a split's view,
    packets with a RARE value)."""
    import duckdb

    con = duckdb.connect(store)
    present = [c for (c,) in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'store' "
        "AND table_name = 'packets'").fetchall() if c in RARE]
    any_set = " OR ".join(f"{c} IS NOT NULL" for c in present)
    con.execute(f"CREATE TEMP TABLE side AS SELECT capture_id, frame, {', '.join(present)} "
                f"FROM store.packets WHERE {any_set}")
    con.execute("CREATE TEMP VIEW split AS SELECT p.ts_ns, s.tcp_mss FROM store.packets p "
                "LEFT JOIN side s USING (capture_id, frame)")
    (side,), = con.execute("SELECT count(*) FROM side").fetchall()
    out = []
    for sql in ("SELECT sum(ts_ns) FROM store.packets", "SELECT sum(ts_ns) FROM split"):
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            con.execute(sql).fetchall()
            best = min(best, time.perf_counter() - started)
        out.append(best * 1e3)
    con.close()
    return out[0], out[1], side


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    compile_kernels()
    warm(a.capture)
    cmd, env = tracekit_command()
    child = [cmd[0], "-P", "-c", CHILD]
    work = tempfile.mkdtemp(prefix="packets_columns-")
    db = os.path.join(work, "traces.duckdb")
    try:
        def ingest(narrow):
            def go():
                if os.path.exists(db):
                    os.remove(db)
                return run_cpu(child + ["ingest", "--db", db, a.capture],
                               {**env, "NARROW": ",".join(RARE) if narrow else ""})
            return go
        load_before = load()
        results = alternate({"ingest, packets as it is": ingest(False),
                             f"ingest, without the {len(RARE)} rare columns": ingest(True),
                             "tcptrace -l -r": lambda: run_cpu(["tcptrace", "-l", "-r", a.capture])},
                            a.rounds)
        load_after = load()
        print(f"\n`{os.path.basename(a.capture)}`; median of {a.rounds} alternated rounds; load "
              f"{load_before[0]:.2f} before, {load_after[0]:.2f} after, {load_after[1]} cores\n")
        peer = medians(results["tcptrace -l -r"])[0]
        print("| tool | seconds | CPU s | peak memory | / tcptrace |\n| --- | ---: | ---: | ---: | ---: |")
        for name, samples in results.items():
            s, mb, cpu = medians(samples)
            print(f"| {name} | {s:.2f} | {cpu:.2f} | {mb:,.0f} MB | {s / peer:.2f} |")
        ingest(False)()
        plain, split, side = read_costs(db)
        print("\n| column content | ms per column, 245,760 rows, one thread |\n| --- | ---: |")
        for name, ms in append_costs().items():
            print(f"| {name} | {ms:.1f} |")
        print(f"\n| read of `ts_ns`, every packet | ms |\n| --- | ---: |\n"
              f"| store.packets | {plain:.1f} |\n"
              f"| through a LEFT JOIN to the {side:,} packets with a rare value | {split:.1f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
