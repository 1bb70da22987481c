"""Kernels compiled ahead of time (tracekit/core/aot.py): numba's answers,
without importing numba."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tracekit.core import aot, jit
from tracekit.readers.capture import open_capture, scan

ROOT = Path(__file__).resolve().parents[1]
PCAP = ROOT / "captures" / "lossy-download-client.pcap"

READ = """
import json, sys
from tracekit.core import jit
jit._aot_folder = sys.argv[1]
from tracekit.readers.capture import open_capture
with open(sys.argv[2], "rb") as f:
    reader = open_capture(sys.argv[2], f)
    reader.jit = True
    offsets = [int(o) for b in reader.batches() for o in b.file_offset]
print(json.dumps({"offsets": offsets, "numba": "numba" in sys.modules,
                  "ahead": jit.aot_function(__import__("tracekit.readers.capture.scan",
                                            fromlist=["x"]).scan_pcap) is not None}))
"""


def _offsets(jit_on):
    with open(PCAP, "rb") as f:
        reader = open_capture(str(PCAP), f)
        reader.jit = jit_on
        return [int(o) for b in reader.batches() for o in b.file_offset]


def test_a_kernel_compiled_ahead_reads_as_numba_does_and_imports_no_numba(tmp_path, monkeypatch):
    monkeypatch.setattr(jit, "_aot_enabled", False)
    monkeypatch.setattr(scan.scan_pcap, "_ahead", False)
    through_numba = _offsets(True)  # (compiles scan_pcap for the types readers give it)
    assert through_numba == _offsets(False) and len(through_numba) > 100
    (path,) = aot.build([scan.scan_pcap], str(tmp_path))
    assert os.path.basename(path).startswith(jit.AOT_PREFIX)
    out = subprocess.run([sys.executable, "-c", READ, str(tmp_path), str(PCAP)],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(tmp_path))
    got = json.loads(out.stdout)
    assert got["ahead"] and not got["numba"]
    assert got["offsets"] == through_numba


def test_other_argument_types_go_to_numba(monkeypatch):
    """A module built for other types refuses the call (TypeError before it
    runs): the kernel is then run through numba, and from then on."""
    refused = []

    def built_for_others(*args):
        refused.append(len(args))
        raise TypeError("no matching definition")

    k = scan.scan_pcap
    monkeypatch.setattr(k, "_ahead", built_for_others)
    buf = np.zeros(64, np.uint8)
    outs = [np.zeros(4, np.int64) for _ in range(5)]
    assert tuple(k(True, buf, 0, 0, False, 1000, *outs)) == (0, 0, scan.NEED_MORE)
    assert refused == [10] and k._ahead is None


def test_a_module_built_ahead_runs_small_inputs_too_unless_told(monkeypatch):
    """Built ahead, a kernel costs no start-up, so the small input that would
    run as Python runs it; TRACEKIT_JIT=never still runs the Python, and a
    module refusing the argument types leaves the small input to the Python
    (not to numba: that start-up is what the small input avoids)."""
    k = scan.scan_pcap
    calls = []

    def ahead(*args):
        calls.append("ahead")
        return (7, 7, 7)

    buf = np.zeros(64, np.uint8)
    outs = [np.zeros(4, np.int64) for _ in range(5)]
    monkeypatch.setattr(k, "_ahead", ahead)
    monkeypatch.setenv("TRACEKIT_JIT", "auto")
    assert tuple(k(False, buf, 0, 0, False, 1000, *outs)) == (7, 7, 7) and calls == ["ahead"]
    monkeypatch.setenv("TRACEKIT_JIT", "never")
    python = tuple(k(False, buf, 0, 0, False, 1000, *outs))
    assert python == (0, 0, scan.NEED_MORE) and calls == ["ahead"]

    def refuses(*args):
        raise TypeError("no matching definition")

    monkeypatch.setattr(k, "_ahead", refuses)
    monkeypatch.setattr(k, "compiled", lambda: pytest.fail("went to numba"))
    monkeypatch.setenv("TRACEKIT_JIT", "auto")
    assert tuple(k(False, buf, 0, 0, False, 1000, *outs)) == python and k._ahead is None


ANALYZE = """
import json, sys
import tracekit
with tracekit.open(sys.argv[1]) as store:
    store.analyze()
    rows = store.con.execute("SELECT count(*) FROM stalls").fetchone()[0]
print(json.dumps({"numba": "numba" in sys.modules, "stalls": rows}))
"""


def test_the_warm_up_builds_analyzes_kernels_ahead_and_analyze_then_imports_no_numba(tmp_path):
    """`make setup` / `make setup-test` (the warm-up) builds every analyze
    kernel ahead of time; a compiled analyze (TRACEKIT_JIT=always) then never
    imports numba, and writes what the Python kernels write."""
    from tracekit.pipeline.warmup import ANALYZE_KERNELS

    left = [k.__name__ for k in aot.missing(ANALYZE_KERNELS)]
    assert not left, f"not built ahead: {left} (run `make setup-test`: the warm-up builds them)"
    rows = {}
    for mode in ("always", "never"):
        db = tmp_path / f"{mode}.duckdb"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACEKIT_JIT": mode}
        subprocess.run([sys.executable, "-m", "tracekit.cli", "ingest", str(PCAP), "--db", str(db)],
                       check=True, capture_output=True, env=env, cwd=str(tmp_path))
        out = subprocess.run([sys.executable, "-c", ANALYZE, str(db)], capture_output=True,
                             text=True, check=True, env=env, cwd=str(tmp_path))
        rows[mode] = json.loads(out.stdout)
    assert rows["always"]["numba"] is False
    assert rows["always"]["stalls"] == rows["never"]["stalls"] > 0
