"""The README's reference is the schema's; SQL files follow the house style."""

from pathlib import Path

import pytest

from tracekit.store.db import analyses_dir
from tracekit.store.schema import DECODE_STATUS_DOC, TABLES, markdown_reference

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


@pytest.mark.parametrize("table", sorted(TABLES))
def test_readme_documents_every_column(table):
    assert f"### `{table}`\n\n{markdown_reference(table)}\n" in README


def test_readme_documents_every_decode_status():
    for code, meaning in DECODE_STATUS_DOC.items():
        assert f"| `{code}` | {meaning} |" in README


@pytest.mark.parametrize("sql", sorted(analyses_dir().glob("*.sql")), ids=lambda p: p.name)
def test_analysis_files_have_header_and_final(sql):
    text = sql.read_text()
    assert text.startswith(f"-- {sql.stem}: ")
    assert "Definitions" in text and "final AS (" in text
    assert text.rstrip().splitlines()[-1].startswith("SELECT * FROM final")
