from pathlib import Path

import pytest

from tracekit.store.db import connect
from tracekit.store.ingest import load_captures

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / "shared" / "captures"


def shared_available():
    return (SHARED / "MANIFEST.tsv").exists()


needs_shared = pytest.mark.skipif(
    not shared_available(),
    reason="../shared/captures is absent (it is provided by the workplace, not the repository)")


@pytest.fixture(scope="session")
def shared_db(tmp_path_factory):
    """A store holding every shared capture, ingested once per test session."""
    if not shared_available():
        pytest.skip("../shared/captures is absent")
    from oracle import captures

    path = tmp_path_factory.mktemp("shared") / "shared.duckdb"
    con = connect(path)
    load_captures(con, [SHARED / name for name in captures()])
    ids = dict(con.execute("SELECT file_name, capture_id FROM captures").fetchall())
    yield con, ids
    con.close()


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "t.duckdb"
    con = connect(path)
    yield con
    con.close()


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return p


