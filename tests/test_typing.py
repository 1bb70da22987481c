"""The public API is typed (py.typed, annotations on tracekit/__init__.py and
tracekit/api.py): mypy --strict passes on it, and on a user's program the
types flow through -- a mistake in that program is caught, with the type
mypy read from the annotations."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")
ROOT = Path(__file__).resolve().parents[1]


def _mypy(tmp_path, *paths):
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                        "--cache-dir", str(tmp_path / "cache"), *map(str, paths)],
                       capture_output=True, text=True, cwd=ROOT)
    return r.returncode, r.stdout


def test_the_api_passes_mypy_strict_and_types_a_users_program(tmp_path):
    assert (ROOT / "tracekit" / "py.typed").exists()
    user = tmp_path / "user.py"
    user.write_text(textwrap.dedent("""
        import tracekit

        def medians(path: str) -> list[int]:
            with tracekit.open(path, read_only=True) as store:
                ids = store.capture_ids()
                html: str = store.report(experiment="cross-region")
                return ids + [len(html)]

        def wrong(path: str) -> str:
            with tracekit.open(path) as store:
                return store.capture_ids()
    """))
    code, out = _mypy(tmp_path, "tracekit/api.py", "tracekit/__init__.py", user)
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert code == 1 and len(errors) == 1, out
    assert 'user.py:12: error: Incompatible return value type (got "list[int]", expected ' \
           '"str")' in errors[0], out


def test_help_says_what_open_returns():
    import tracekit
    assert "tracekit.api.Store" in tracekit.open.__doc__
    assert "store.report" in tracekit.open.__doc__


def test_a_single_factor_by_is_not_split_into_letters(demo_store):
    import tracekit
    with tracekit.open(demo_store, read_only=True) as store:
        by_name = store.ablation("path", by="connection", levels=["direct", "tunnel"],
                                 where={"experiment": "cross-region"})
    assert list(by_name["connection"]) == ["fresh", "persistent"]
    assert by_name["ci_low"].dtype.kind == "f" and by_name["won"].tolist() == [0, 5]
