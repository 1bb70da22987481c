"""Recovery of unfinished work, from the schema's own staging markers.

Strategy: a capture being ingested has a row in `ingests_in_progress`, and a
per-capture analysis written in many transactions has one in
`analyses_in_progress` naming it; the staged tables' views hide those
captures' rows (store/schema.py STAGED_BY). Whoever opens the store for
writing holds DuckDB's file lock, so every marker left is an orphan of a
crash or a kill: its rows are deleted here, by table, as the markers say.
Nothing here knows what an analysis computes.
"""

from .schema import INGESTED, STAGED_BY, storage


def discard_analysis(con, analysis, capture_id):
    """Remove what an unfinished build of `analysis` wrote for one capture."""
    for table in (t for t, by in STAGED_BY.items() if by == analysis):
        if _exists(con, table):
            con.execute(f"DELETE FROM {storage(table)} WHERE capture_id = ?", [capture_id])
    con.execute("DELETE FROM analyses_in_progress WHERE analysis = ? AND capture_id = ?",
                [analysis, capture_id])


def discard_ingests(con, capture_ids):
    """Remove every row ingest wrote for these captures."""
    for table in INGESTED:
        con.execute(f"DELETE FROM {storage(table)} WHERE list_contains(?, capture_id)",
                    [list(capture_ids)])


def recover_ingests(con):
    """Delete the rows of ingests that never finished; return their capture ids."""
    ids = [r[0] for r in con.execute("SELECT capture_id FROM ingests_in_progress").fetchall()]
    if ids:
        discard_ingests(con, ids)
        con.execute("DELETE FROM ingests_in_progress")
    return ids


def recover_analyses(con):
    """Delete the rows of per-capture analyses that never finished."""
    for analysis, cid in con.execute(
            "SELECT DISTINCT analysis, capture_id FROM analyses_in_progress").fetchall():
        discard_analysis(con, analysis, cid)


def recover(con):
    """Both, when any marker is left (a cheap check on every writable open)."""
    (left,), = con.execute("SELECT (SELECT count(*) FROM ingests_in_progress) + "
                           "(SELECT count(*) FROM analyses_in_progress)").fetchall()
    if left:
        recover_ingests(con)
        recover_analyses(con)


def _exists(con, table):
    schema = "store" if table in STAGED_BY else "main"
    return con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ? "
                       "AND table_schema = ?", [table, schema]).fetchall()[0][0] > 0
