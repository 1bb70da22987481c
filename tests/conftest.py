import os
import shutil
from pathlib import Path

import pytest

from tracekit.pipeline.captures import load_captures
from tracekit.store.db import connect

HERE = Path(__file__).resolve().parent
# the workplace's third-party captures and logs (not in the repository); TRACEKIT_SHARED
# points elsewhere (a missing folder: every test that needs it skips, with its reason)
SHARED = Path(os.environ.get("TRACEKIT_SHARED", HERE.parents[1] / "shared")) / "captures"


def shared_available():
    return (SHARED / "MANIFEST.tsv").exists()


# `make test` runs the suite on two workers, each test file whole on one
# (pytest-xdist, `--dist loadfile`), handed out in the order collected: the
# slowest files go first, so that none starts last and leaves a core idle at
# the end. Slowest first, from `pytest --durations` on 2026-12-06 (seconds of
# the file's tests and fixtures on one worker: 80-130, then 40-70).
SLOW_FIRST = ("test_whatif.py", "test_cluster.py", "test_report.py", "test_chapter_case.py",
              "test_readme_tour.py", "test_faults.py", "test_cli_examples.py",
              "test_fault_campaign.py", "test_dataset_readers.py", "test_lab_emulator.py",
              "test_lab_experiment.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # (stable: else as collected)


needs_shared = pytest.mark.skipif(
    not shared_available(),
    reason="../shared/captures is absent (it is provided by the workplace, not the repository)")


# A test of the lab path: slow, root for its namespaces, tcpdump for its
# captures, a C compiler for its forwarder.
LAB_MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces)"),
    pytest.mark.skipif(not shutil.which("tcpdump"), reason="tcpdump is not installed"),
    pytest.mark.skipif(not shutil.which("gcc") and not shutil.which("cc"), reason="no C compiler"),
]


@pytest.fixture(scope="session")
def shared_db(tmp_path_factory):
    """A store holding every shared capture, ingested once per test session."""
    if not shared_available():
        pytest.skip("../shared/captures is absent")
    from oracle import captures

    path = tmp_path_factory.mktemp("shared") / "shared.duckdb"
    con = connect(path)
    load_captures(con, [SHARED / name for name in captures()])
    ids = dict(con.execute("SELECT file_name, capture_id FROM captures").fetchall())
    yield con, ids
    con.close()


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "t.duckdb"
    con = connect(path)
    yield con
    con.close()


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return p


SAMPLES_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory):
    """The store `make demo` builds: the samples, the lab's reference runs, analysed."""
    from click.testing import CliRunner

    from tracekit.cli import main
    db = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    samples = [str(p) for p in sorted((SAMPLES_ROOT / "captures").glob("*.pcap*"))]
    samples += [str(p) for p in sorted((SAMPLES_ROOT / "captures").glob("*events.jsonl"))]
    samples.append(str(SAMPLES_ROOT / "captures" / "serving-static-batching.jsonl"))
    r = CliRunner().invoke(main, ["ingest", *samples, "--db", str(db)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["ingest", "--db", str(db),
                                  "--manifest", str(SAMPLES_ROOT / "captures/lab/cross-region.runs.json"),
                                  "--manifest", str(SAMPLES_ROOT / "captures/lab/counterfactual.runs.json"),
                                  "--manifest", str(SAMPLES_ROOT / "captures/lab/agent.runs.json")])
    assert r.exit_code == 0, r.output
    assert CliRunner().invoke(main, ["analyze", "--db", str(db)]).exit_code == 0
    return db
