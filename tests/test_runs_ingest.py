"""Ingesting a manifest's many runs in one command (tracekit/store/runs.py)."""

import os
from pathlib import Path

from tracekit import jit
from tracekit.store.db import connect
from tracekit.store.runs import ingest_run_inputs


def test_a_manifests_runs_decide_on_compiled_kernels_together(tmp_path, monkeypatch):
    """Whether compiled kernels pay for their start-up is decided on all the
    runs' captures at once: each of the chapter's 240 runs alone is too small,
    and scanning them all as Python took 25 s of a 45 s ingest."""
    samples = Path(__file__).resolve().parents[1] / "captures"
    runs = [([str(samples / f"lossy-download-{side}.pcap")], [], {"run": side})
            for side in ("client", "server")]
    asked = []
    monkeypatch.setattr(jit, "prefer_compiled", asked.append)
    con = connect(tmp_path / "s.duckdb")
    ingest_run_inputs(con, runs)
    con.close()
    both = sum(os.stat(r[0][0]).st_size for r in runs)
    assert asked[0] == both  # before any run, for all of them
