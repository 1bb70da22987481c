"""Proof by counterfactual: removing a mechanism saves what its span predicted.

Small versions of experiments/counterfactual-*.toml run with real kernel TCP
over the emulated path: the first arm has the mechanism, the second not; the
spans of the first arm predict the saving (tracekit ablation --predict), and
the measured saving (difference of medians) must agree -- inside its
bootstrap interval or within 10 % / 10 ms. The reference experiments in
captures/lab test the loss and connection factors the same way.
"""

import os
import shutil
from pathlib import Path

import pytest

from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.ingest import ingest_runs
from tracekit.pipeline.manifests import read_manifest
from tracekit.presentation.ablation import ablation, predict
from tracekit.store.db import connect

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
SAMPLES = Path(__file__).resolve().parents[1] / "captures"

needs_lab = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("tcpdump"),
                               reason="the lab needs root (network namespaces) and tcpdump")


def _run(tmp_path, name, trials=3):
    from click.testing import CliRunner

    from tracekit.cli import main
    text = (EXPERIMENTS / f"counterfactual-{name}.toml").read_text()
    text = text.replace("trials = 5", f"trials = {trials}")
    exp = tmp_path / f"{name}.toml"
    exp.write_text(text)
    db = str(tmp_path / "cf.duckdb")
    r = CliRunner().invoke(main, ["lab", "run", str(exp), "--out", str(tmp_path / "runs"),
                                  "--db", db])
    assert r.exit_code == 0, r.output
    con = connect(db)
    analyze(con)
    return con


@pytest.mark.slow
@needs_lab
@pytest.mark.parametrize("name, compare, levels", [
    ("processing", "processing_ms", ["30", "0"]),
    ("rtt", "rtt_ms", ["100", "40"]),
])
def test_removing_a_mechanism_saves_what_its_span_predicted(tmp_path, name, compare, levels):
    con = _run(tmp_path, name)
    (c,) = ablation(con, compare, levels=levels)
    p = predict(c, compare)
    assert p is not None and p.predicted_ns > 10e6
    assert p.holds, (p.predicted_ns / 1e6, p.measured_ns / 1e6, p.ci_low_ns / 1e6, p.ci_high_ns / 1e6)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    con = connect(tmp_path_factory.mktemp("cf") / "ref.duckdb")
    ingest_runs(con, read_manifest(SAMPLES / "lab" / "counterfactual.runs.json"))
    analyze(con)
    yield con
    con.close()


def test_the_reference_runs_predictions(reference):
    """Warming the connection without loss, and removing the loss from a warm
    connection: the spans predict the saving. On fresh connections with loss
    the two mechanisms interact (slow start's window waiting and the loss
    recovery of small windows overlap in time), so each span alone misses:
    that is reported, not hidden."""
    verdicts = {}
    for compare, by, levels in (("loss_down", "connection", ["0.05", "0.0"]),
                                ("connection", "loss_down", ["fresh", "persistent"])):
        for c in ablation(reference, compare, by=[by], levels=levels,
                          where={"experiment": "counterfactual"}):
            verdicts[(compare, c.by[0])] = predict(c, compare).holds
    assert verdicts == {("loss_down", "persistent"): True, ("connection", "0.0"): True,
                        ("loss_down", "fresh"): False, ("connection", "0.05"): False}
