"""The README's five-minute tour runs as written, line by line, in a folder
that holds what `make demo` leaves: demo.duckdb (the suite's demo store),
captures/ and a `.venv/bin/activate` that puts `tracekit` on PATH."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tour():
    text = (ROOT / "README.md").read_text()
    block = text.split("## A five-minute tour", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split(" #", 1)[0].strip() for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_the_tour_names_the_demo_store_and_what_it_holds():
    lines = _tour()
    assert lines[:2] == ["source .venv/bin/activate", "export TRACEKIT_DB=demo.duckdb"]
    assert sum(line.startswith("tracekit ") for line in lines) >= 10


def test_the_tour_runs_as_written(demo_store, tmp_path):
    shutil.copy(demo_store, tmp_path / "demo.duckdb")
    (tmp_path / "captures").symlink_to(ROOT / "captures")
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "tracekit").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m tracekit.cli "$@"\n')
    (venv / "tracekit").chmod(0o755)
    (venv / "activate").write_text(f'PATH={shlex.quote(str(venv))}:"$PATH"\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRACEKIT_DB", None)
    script = "set -e\n" + "\n".join(f"echo '>>> {re.sub(chr(39), '', line)}'\n{line}"
                                    for line in _tour())
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    for made in ("seq.html", "seq.png", "one.html", "report.html"):
        assert (tmp_path / made).stat().st_size > 10_000, made
    assert "no difference shown" in r.stdout and "holds" in r.stdout
