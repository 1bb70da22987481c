"""Run the SQL files of analyses/ against the store."""

import duckdb

from ..core.errors import QueryError, TracekitError
from ..core.model import sql_macros
from ..store.db import analyses_dir


def install_macros(con):
    """Create tracekit.model's formulas as temporary macros of this connection
    (each connection, cursors included, has its own): the SQL analyses call them."""
    for statement in sql_macros():
        con.execute(statement)


def analysis_sql(name):
    """Text of analyses/<name>.sql (`views/<name>` for a CLI view)."""
    path = analyses_dir() / f"{name}.sql"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in analyses_dir().glob("*.sql")))
        raise TracekitError(f"no analysis named {name!r}; known: {known}")
    return path.read_text()


def run_analysis(con, name, **params):
    """Execute analyses/<name>.sql with named parameters; return (columns, rows)."""
    sql = analysis_sql(name)
    try:
        install_macros(con)
        cur = con.execute(sql, params)
    except duckdb.Error as e:
        raise QueryError(f"analyses/{name}.sql failed: {str(e).splitlines()[0]}") from None
    columns = [d[0] for d in cur.description]
    return columns, cur.fetchall()
