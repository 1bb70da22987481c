"""Are two tracekit stores the same, table by table, row for row?

    python tools/same_tables.py before.duckdb after.duckdb

For every table and view either store holds (bookkeeping left out: when a
row was built or ingested, how long it took, where the file was), the rows
of one EXCEPT ALL the rows of the other, both ways: a difference in any
row, or a table only one side has, is printed and the exit status is 1.
This is how a change that must not change results (a move of code, a
faster kernel) is checked on real stores.
"""

import sys

import duckdb

# columns that record when or how fast something was built, not what it holds
VOLATILE = {"ingested_at", "built_at", "seconds", "updated_at", "started_at", "path",
            "analysed_at", "created_at"}
BOOKKEEPING = {"analysis_runs", "analyses_in_progress", "ingests_in_progress"}


def relations(con, alias):
    return {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = ? "
        "AND table_schema = 'main'", [alias]).fetchall()} - BOOKKEEPING


def columns(con, alias, table):
    return [r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_catalog = ? "
        "AND table_schema = 'main' AND table_name = ? ORDER BY ordinal_position",
        [alias, table]).fetchall()]


def compare(a_path, b_path, out=print):
    con = duckdb.connect()
    con.execute(f"ATTACH '{a_path}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{b_path}' AS b (READ_ONLY)")
    a, b = relations(con, "a"), relations(con, "b")
    differences = 0
    for t in sorted(a ^ b):
        out(f"{t}: only in {'the first' if t in a else 'the second'} store")
        differences += 1
    for t in sorted(a & b):
        ca, cb = columns(con, "a", t), columns(con, "b", t)
        if ca != cb:
            out(f"{t}: columns differ: {ca} vs {cb}")
            differences += 1
            continue
        keep = ", ".join(f'"{c}"' for c in ca if c not in VOLATILE)
        if not keep:
            continue
        one = con.execute(f"SELECT count(*) FROM (SELECT {keep} FROM a.{t} EXCEPT ALL "
                          f"SELECT {keep} FROM b.{t})").fetchall()[0][0]
        two = con.execute(f"SELECT count(*) FROM (SELECT {keep} FROM b.{t} EXCEPT ALL "
                          f"SELECT {keep} FROM a.{t})").fetchall()[0][0]
        n = con.execute(f"SELECT count(*) FROM a.{t}").fetchall()[0][0]
        if one or two:
            out(f"{t}: {one} rows only in the first, {two} only in the second (of {n})")
            differences += 1
        else:
            out(f"{t}: same {n} rows")
    return differences


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(1 if compare(sys.argv[1], sys.argv[2]) else 0)
