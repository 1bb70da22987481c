"""Kernels compiled ahead of time (tracekit/core/aot.py): numba's answers,
without importing numba."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

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
