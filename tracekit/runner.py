"""Run the SQL files of analyses/ against the store."""

from .errors import TracekitError
from .store.db import analyses_dir


def analysis_sql(name):
    path = analyses_dir() / f"{name}.sql"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in analyses_dir().glob("*.sql")))
        raise TracekitError(f"no analysis named {name!r}; known: {known}")
    return path.read_text()


def run_analysis(con, name, **params):
    """Execute analyses/<name>.sql with named parameters; return (columns, rows)."""
    cur = con.execute(analysis_sql(name), params)
    columns = [d[0] for d in cur.description]
    return columns, cur.fetchall()
