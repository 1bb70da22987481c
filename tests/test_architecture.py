"""The plan of the house holds: imports go one way, rooms stay small enough to
read in one sitting (docs/architecture.md)."""

import ast
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tracekit"
MODULE_LINES = 500
FUNCTION_LINES = 80
# a single numba state machine may be longer, when its docstring says it is one
STATE_MACHINE = "state machine"


def test_imports_keep_the_layers_contracts():
    """import-linter's contracts in pyproject.toml: one-way floors, a CLI over the
    api and the presentation only, nothing below the faces importing them, pure
    kernels and decoders."""
    lint = shutil.which("lint-imports", path=str(pathlib.Path(sys.executable).parent))
    if lint is None:
        pytest.skip("import-linter is not installed (pip install 'tracekit[test]')")
    r = subprocess.run([lint, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                       capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout[-3000:]
    assert "0 broken" in r.stdout


def _python_files():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


# files allowed to break the size rules while they wait to be split (none now)
ALLOWED_LONG: set[str] = set()


def test_no_module_is_longer_than_a_sitting():
    long = [(path, n) for p in _python_files()
            if (n := p.read_text().count("\n")) > MODULE_LINES
            and (path := p.relative_to(ROOT).as_posix()) not in ALLOWED_LONG]
    assert not long


def test_no_function_is_longer_than_a_screenful_unless_it_is_one_state_machine():
    long = []
    for p in _python_files():
        path = p.relative_to(ROOT).as_posix()
        if path in ALLOWED_LONG:
            continue
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            n = node.end_lineno - node.lineno + 1
            doc = ast.get_docstring(node) or ""
            if n > FUNCTION_LINES and STATE_MACHINE not in doc:
                long.append((f"{path}:{node.lineno}", node.name, n))
    assert not long


def _breaks_a_size_rule(p):
    text = p.read_text()
    return text.count("\n") > MODULE_LINES or any(
        node.end_lineno - node.lineno + 1 > FUNCTION_LINES
        and STATE_MACHINE not in (ast.get_docstring(node) or "")
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))


def test_the_allow_list_holds_only_files_that_still_break_the_rules():
    """A file that obeys the rules comes off ALLOWED_LONG."""
    assert [path for path in sorted(ALLOWED_LONG)
            if not _breaks_a_size_rule(ROOT / path)] == []


def test_the_drawing_of_the_imports_is_current_and_points_down():
    import re
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import import_graph
    finally:
        sys.path.pop(0)
    assert not import_graph.upward()
    doc = (ROOT / "docs" / "architecture.md").read_text()
    drawn = re.search(r"<!-- import-graph -->\n(.*?)<!-- /import-graph -->", doc, re.S).group(1)
    assert drawn.strip() == import_graph.mermaid().strip(), \
        "run python tools/import_graph.py and paste it into docs/architecture.md"
