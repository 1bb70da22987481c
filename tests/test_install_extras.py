"""What an install carries: every declared extra is imported by tracekit, and
report/plot (in the default install) say in one line what an install lacks."""

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
# a distribution's name -> the module tracekit imports it as (where they differ)
MODULE = {"dask[distributed]": "dask", "opentelemetry-sdk": "opentelemetry.sdk",
          "opentelemetry-exporter-otlp-json-file": "opentelemetry.exporter.otlp.json.file",
          "vl-convert-python": "vl_convert"}


def _imported():
    """Every module named by an import anywhere in the package (in functions too)."""
    names = set()
    for path in (ROOT / "tracekit").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
    return names


def _module(requirement):
    name = re.match(r"[A-Za-z0-9_.\-\[\]]+", requirement).group(0)
    return MODULE.get(name, name.replace("-", "_"))


def test_every_declared_extra_and_dependency_is_imported():
    """(The `pyshark` extra was declared and never imported: gone.) The test
    extra is the suite's, not the package's."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    imported = _imported()
    wanted = {e: [_module(r) for r in reqs]
              for e, reqs in project["optional-dependencies"].items() if e != "test"}
    wanted["(default)"] = [_module(r) for r in project["dependencies"]]
    unused = {e: [m for m in mods if not any(i == m or i.startswith(m + ".") for i in imported)]
              for e, mods in wanted.items()}
    assert {e: m for e, m in unused.items() if m} == {}
    assert "pyshark" not in project["optional-dependencies"]
    for module in ("altair", "vl_convert", "jinja2"):  # report and plot: the default install
        assert module in wanted["(default)"]


@pytest.mark.parametrize("command", [["report"], ["plot", "waterfall", "--request", "r"]])
def test_report_and_plot_name_what_an_install_lacks_in_one_line(tmp_path, monkeypatch, command):
    from tracekit.cli import main
    monkeypatch.setitem(sys.modules, "vl_convert", None)  # as if removed from the install
    r = CliRunner().invoke(main, [*command, "--db", str(tmp_path / "none.duckdb")])
    assert r.exit_code == 2, r.output
    assert r.output == ("tracekit: error: report and plot need vl-convert-python, part of "
                        "tracekit's install but missing from this one: pip install "
                        "vl-convert-python\n")
    assert not (tmp_path / "none.duckdb").exists()  # said before anything was opened
