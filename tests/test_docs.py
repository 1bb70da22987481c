"""The manual: a short README, docs/ for the rest (its table reference is the
schema's); links resolve; SQL files follow the house style."""

from pathlib import Path

import pytest

from tracekit.store.db import analyses_dir
from tracekit.store.schema import DERIVED, TABLES, markdown_document, markdown_reference

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def test_docs_tables_is_the_schema():
    """docs/tables.md is exactly what the schema generates (every table, column,
    type and meaning; every decode status)."""
    text = (DOCS / "tables.md").read_text()
    assert text == markdown_document(), "regenerate: python -m tracekit.store.schema > docs/tables.md"
    for table in {**TABLES, **DERIVED}:
        assert markdown_reference(table) in text


@pytest.mark.parametrize("sql", sorted(analyses_dir().glob("*.sql")), ids=lambda p: p.name)
def test_analysis_files_have_header_and_final(sql):
    text = sql.read_text()
    assert text.startswith(f"-- {sql.stem}: ")
    assert "Definition" in text and "final AS (" in text
    assert text.rstrip().splitlines()[-1].startswith("SELECT * FROM final")


def test_every_derived_table_is_built_and_listed():
    from tracekit.pipeline.analyze import _steps
    tables = [t for s in _steps() for t in s.tables]
    analyses = (DOCS / "analyses.md").read_text()
    for table in tables:
        assert f"| `{table}` |" in analyses
    assert set(DERIVED) <= set(tables)


def test_sql_headers_name_every_column(shared_db):
    """Each SQL-built table's header comment names every column it produces."""
    from tracekit.pipeline.analyze import SqlStep, _steps, analyze
    con, _ = shared_db
    analyze(con)
    for step in _steps():
        if not isinstance(step, SqlStep):
            continue
        header = "\n".join(line for line in (analyses_dir() / f"{step.table}.sql").read_text()
                           .splitlines() if line.startswith("--"))
        columns = [r[0] for r in con.execute(f"DESCRIBE {step.table}").fetchall()]
        # each column by its exact name (a word of the header, not part of another)
        import re
        missing = [c for c in columns if not re.search(rf"(?<![a-z0-9_]){re.escape(c)}(?![a-z0-9_])",
                                                       header)]
        assert not missing, (step.table, missing)


def test_the_readme_is_short_and_its_links_resolve():
    import re
    assert len(README.splitlines()) < 300
    pages = [ROOT / "README.md", *DOCS.glob("*.md")]
    for page in pages:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if target.startswith(("http://", "https://")):
                continue
            assert (page.parent / target).exists(), f"{page.name}: {target} does not exist"
        # the project's own pages only: no notes that live outside the repository
        assert "DOMAIN.md" not in text and "DESIGN.md" not in text, page.name


@pytest.mark.parametrize("sql", sorted((analyses_dir() / "views").glob("*.sql")), ids=lambda p: p.name)
def test_view_files_name_their_command_and_parameters(sql):
    """Each view's SQL says which command shows it (one that exists) and, in
    its header, every $parameter its body uses."""
    import re

    from tracekit.cli import main
    text = sql.read_text()
    assert text.startswith(f"-- The `tracekit {sql.stem}` view: "), sql.name
    assert sql.stem in main.commands, sql.stem
    header = "\n".join(line for line in text.splitlines() if line.startswith("--"))
    (params,) = re.findall(r"^-- Parameters: (.*)$", header, re.M)
    used = set(re.findall(r"\$([a-z_]+)", "\n".join(
        line for line in text.splitlines() if not line.startswith("--"))))
    named = set(re.findall(r"\$([a-z_]+)", params))
    assert used == named, (sql.name, used, named)
