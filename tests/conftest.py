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


# `make test` runs the suite on two workers (pytest-xdist): each test file whole on
# one (its module fixtures run once), and the files whose tests build lab paths
# (network namespaces, tcpdump, a paced forwarder) all on the same one, one after
# another -- on two workers at once a lab test saw the other's namespaces and
# measured its path beside the other's forwarder. The files are those whose tests
# made a namespace while /run/netns was watched through a whole run (2026-12-06);
# a file that only imports tracekit.lab needs no place here.
LAB_FILES = frozenset({
    "test_bottleneck.py", "test_counterfactual.py", "test_hostile_lab.py",
    "test_lab_agent.py", "test_lab_emulator.py", "test_lab_experiment.py",
    "test_lab_multiplexing.py", "test_lab_path.py", "test_lab_quic.py", "test_lab_safety.py",
    "test_lab_streaming.py", "test_lab_tls.py", "test_lab_transport.py", "test_server_view.py",
    "test_stalls_receiver.py", "test_streams_lab.py", "test_whatif.py"})
# The groups handed out first, slowest first (`pytest --durations`, one worker,
# 2026-12-06: the lab's files together about 280 s, then 35-90 s each; xdist's
# own order, by number of tests, is turned off in the Makefile), so that none
# starts last and leaves a core idle at the end; the rest as collected.
SLOW_FIRST = ("lab", "test_cluster.py", "test_report.py", "test_chapter_case.py",
              "test_faults.py", "test_readme_tour.py", "test_fault_campaign.py",
              "test_dataset_readers.py", "test_cli_examples.py", "test_analyze.py",
              "test_whatif_droplog.py", "test_fuzz_campaign.py")


def group_of(nodeid):
    """The unit a worker takes whole: the lab's files together, else the file."""
    path = nodeid.split("::", 1)[0]
    return "lab" if os.path.basename(path) in LAB_FILES else path


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(os.path.basename(group_of(item.nodeid)), len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    # xdist's own grouping (--dist loadgroup) renames the tests, which pytest 9.2
    # no longer lets it do (pytest-xdist issue #1386: the groups are silently
    # ignored); a scheduler by file whose scope names the lab's files alike is
    # the same thing without renaming anything. Only where whole files are
    # asked for (the Makefile's --dist loadfile); any other --dist is xdist's.
    if config.getvalue("dist") not in ("loadfile", "loadscope"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FilesAndTheLab(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return group_of(nodeid)

    return FilesAndTheLab(config, log)


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
