"""Many captures on Dask into a Parquet dataset (tracekit/pipeline/cluster/), on a real
`distributed.LocalCluster` of 2 worker processes: the dataset's tables equal
the single-process store's row for row, in both directions; a worker killed
mid-task leaves no partial capture and the run (or the next one) completes."""

import os
import shutil
import tempfile

import duckdb
import pytest
from click.testing import CliRunner
from conftest import SAMPLES_ROOT

from tracekit.cli import main
from tracekit.store.dataset import PARTIAL, read_manifest, recorded, tables
from tracekit.store.db import open_dataset

pytest.importorskip("distributed")

# differ by nature between two ingests of the same files: when, how long, and the
# store-wide steps' version stamp (it hashes when their inputs were ingested)
VOLATILE = {"ingested_at", "updated_at", "built_at", "seconds"}
SAMPLES = ([str(p) for p in sorted((SAMPLES_ROOT / "captures").glob("*.pcap*"))]
           + [str(p) for p in sorted((SAMPLES_ROOT / "captures").glob("*events.jsonl"))]
           + [str(SAMPLES_ROOT / "captures" / "serving-static-batching.jsonl")])
MANIFESTS = ["--manifest", str(SAMPLES_ROOT / "captures/lab/cross-region.runs.json"),
             "--manifest", str(SAMPLES_ROOT / "captures/lab/counterfactual.runs.json"),
             "--manifest", str(SAMPLES_ROOT / "captures/lab/agent.runs.json")]
SMALL = [str(SAMPLES_ROOT / "captures" / n) for n in
         ("lossy-download-client.pcap", "lossy-download-server.pcap", "udp-echo.pcapng")]


def _rows(con, name, types):
    cols = [c for c in types if c not in VOLATILE]
    sql = ", ".join(f'"{c}"' for c in cols)
    if name == "analysis_runs":  # a store-wide step's version hashes its inputs' ingest times
        sql = sql.replace('"version"', "CASE WHEN capture_id = 0 THEN NULL ELSE version END")
    return con.execute(f"SELECT {sql} FROM {name}").fetchall()


def assert_same_store(db_path, directory):
    """Every table of the DuckDB store equals the dataset's, both ways (multisets)."""
    from collections import Counter
    with duckdb.connect(str(db_path), read_only=True) as ref:
        want = {name: types for name, types, _ in tables(ref)}
        assert set(read_manifest(str(directory))) == set(want)
        ds = open_dataset(str(directory))
        for name, types in want.items():
            a, b = Counter(map(repr, _rows(ref, name, types))), Counter(map(repr, _rows(ds, name, types)))
            assert a == b, (name, list((a - b).items())[:2], list((b - a).items())[:2])
        assert sum(Counter(map(repr, _rows(ref, "packets", want["packets"]))).values()) > 0


@pytest.fixture(autouse=True)
def private_temp(tmp_path, monkeypatch):
    """Each test's own temporary folder, for the coordinator and for the workers
    it starts (they inherit TMPDIR): task folders of dead processes that other
    work on the machine left in /tmp are not this run's leftovers (a CI run
    beside a kill -9 campaign counted one)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again


def _leftovers(directory):
    """What a run left: in the dataset's _partial/, and task folders of dead
    processes in the temporary folder (a killed worker cannot remove its own;
    the next task on the host does)."""
    from tracekit.pipeline.cluster.tasks import WORK_PREFIX, _alive
    partial = os.path.join(directory, PARTIAL)
    left = os.listdir(partial) if os.path.isdir(partial) else []
    for name in os.listdir(tempfile.gettempdir()):
        pid = name[len(WORK_PREFIX):].split("-")[0]
        if name.startswith(WORK_PREFIX) and pid.isdigit() and not _alive(int(pid)):
            left.append(name)
    return left


def test_dataset_on_two_workers_equals_the_single_store(demo_store, tmp_path):
    ds = str(tmp_path / "ds") + "/"
    # as the demo store was made: the samples, then the lab's runs (a second run adds to it)
    r = CliRunner().invoke(main, ["ingest", *SAMPLES, "--store", ds, "--workers", "2"])
    assert r.exit_code == 0, r.output
    assert "on a local Dask cluster of 2 workers" in r.output
    r = CliRunner().invoke(main, ["ingest", *MANIFESTS, "--store", ds, "--workers", "2"])
    assert r.exit_code == 0, r.output
    # every store-wide step built (agent_rounds and tasks read attribution, which
    # the cluster builds: they failed when held back by a list written by hand)
    assert "could not be built" not in r.output, r.output
    assert_same_store(demo_store, ds)
    assert not _leftovers(ds)
    # the CLI's views read the dataset as they read the store
    for args in (["attribute", "--run", "cross-region-001"], ["retransmissions", "--capture", "3"],
                 ["ablation", "--compare", "path", "--by", "connection",
                  "--levels", "direct,tunnel", "--where", "experiment=cross-region"]):
        a = CliRunner().invoke(main, [*args, "--db", str(demo_store)])
        b = CliRunner().invoke(main, [*args, "--store", ds])
        assert a.exit_code == b.exit_code == 0 and a.output == b.output, args
    # the same files again: nothing added
    r = CliRunner().invoke(main, ["ingest", *SMALL, "--store", ds, "--workers", "1"])
    assert r.exit_code == 0 and r.output.count("already in the dataset") == 3, r.output


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    db = tmp_path_factory.mktemp("small") / "small.duckdb"
    assert CliRunner().invoke(main, ["ingest", *SMALL, "--db", str(db)]).exit_code == 0
    assert CliRunner().invoke(main, ["analyze", "--db", str(db)]).exit_code == 0
    return db


def test_a_worker_killed_before_publishing_leaves_nothing_and_its_task_runs_again(
        small_store, tmp_path, monkeypatch):
    ds = str(tmp_path / "ds") + "/"
    flag = tmp_path / "killed-once"
    monkeypatch.setenv("TRACEKIT_FAULT_BEFORE_PUBLISH", f"2:{flag}")
    r = CliRunner().invoke(main, ["ingest", *SMALL, "--store", ds, "--workers", "2"])
    assert r.exit_code == 0, r.output
    assert flag.exists()  # the worker really died with capture 2 written, not published
    assert "3 captures" in r.output and "0 failures" in r.output
    assert not _leftovers(ds)
    assert_same_store(small_store, ds)


def test_a_capture_that_kills_every_worker_is_reported_and_the_next_run_completes(
        small_store, tmp_path, monkeypatch):
    ds = str(tmp_path / "ds") + "/"
    monkeypatch.setenv("TRACEKIT_FAULT_BEFORE_PUBLISH", "2:always")
    r = CliRunner().invoke(main, ["ingest", *SMALL, "--store", ds, "--workers", "2"])
    assert r.exit_code == 1
    assert "lossy-download-server.pcap (capture 2) failed twice" in r.output
    # nothing of capture 2 is visible; the others are; the store-wide tables are
    # empty, not built over part of the run (they would be wrong)
    assert "the store-wide tables (requests, attribution...) are empty: 1 capture" in r.output
    assert recorded(ds) == [1, 3]
    assert sorted(os.listdir(os.path.join(ds, "packets"))) == ["capture_id=1", "capture_id=3"]
    assert not _leftovers(ds)
    con = open_dataset(ds)
    assert con.execute("SELECT list(capture_id ORDER BY capture_id) FROM captures").fetchone()[0] == [1, 3]
    assert con.execute("SELECT count(*) FROM packets WHERE capture_id = 2").fetchone()[0] == 0
    assert con.execute("SELECT (SELECT count(*) FROM requests) + (SELECT count(*) FROM bounds)"
                       ).fetchone() == (0,)
    con.close()
    monkeypatch.delenv("TRACEKIT_FAULT_BEFORE_PUBLISH")
    r = CliRunner().invoke(main, ["ingest", *SMALL, "--store", ds, "--workers", "2"])
    assert r.exit_code == 0, r.output
    assert r.output.count("already in the dataset") == 2 and "capture 2:" in r.output
    assert_same_store(small_store, ds)


def test_a_capture_task_run_again_leaves_the_published_folder_as_it_is(small_store, tmp_path):
    """Dask runs a finished task again when the worker holding its result dies
    (one killed by another capture). That run must not swap the published
    folder: the coordinator may be reading it (a full-suite run here lost capture 1's
    rows that way)."""
    from tracekit.pipeline.cluster.tasks import capture_task
    from tracekit.store.dataset import capture_dir
    ds = str(tmp_path / "ds") + "/"
    r = CliRunner().invoke(main, ["ingest", *SMALL, "--store", ds, "--workers", "1"])
    assert r.exit_code == 0, r.output
    folder = capture_dir(os.path.abspath(ds), 1, "packets")
    before = os.stat(folder).st_ino
    again = capture_task(SMALL[0], 1, {}, os.path.abspath(ds))
    assert again["capture_id"] == 1 and again["packets"] > 0
    assert os.stat(folder).st_ino == before  # not swapped
    assert not _leftovers(ds)
    assert_same_store(small_store, ds)


def test_analyze_on_the_cluster_redoes_what_a_changed_threshold_changes(tmp_path):
    from tracekit.pipeline.cluster import local_cluster
    ds = str(tmp_path / "ds") + "/"
    db = str(tmp_path / "ref.duckdb")
    client, cluster = local_cluster(2)  # a running scheduler, reached by its address
    address = ["--cluster", cluster.scheduler_address]
    try:
        assert CliRunner().invoke(main, ["ingest", *SMALL, "--store", ds, *address]).exit_code == 0
        r = CliRunner().invoke(main, ["analyze", "--store", ds, *address])
        assert r.exit_code == 0 and "per-capture analyses: up to date" in r.output, r.output
        assert f"on the Dask cluster at {cluster.scheduler_address}" in r.output
        before = _digest(ds)
        r = CliRunner().invoke(main, ["analyze", "--store", ds, *address, "--dupthresh", "10"])
        assert r.exit_code == 0 and r.output.count("analysed again") == 3, r.output
    finally:
        client.close()
        cluster.close()
    assert CliRunner().invoke(main, ["ingest", *SMALL, "--db", db]).exit_code == 0
    assert CliRunner().invoke(main, ["analyze", "--db", db, "--dupthresh", "10"]).exit_code == 0
    assert_same_store(db, ds)
    assert _digest(ds) != before  # the threshold changed the classification


def _digest(ds):
    con = open_dataset(ds)
    try:
        return con.execute("SELECT bit_xor(hash(t)) FROM tcp_analysis t").fetchone()[0]
    finally:
        con.close()


def test_a_dataset_is_not_written_by_single_store_commands(tmp_path):
    ds = str(tmp_path / "ds") + "/"
    assert CliRunner().invoke(main, ["ingest", SMALL[2], "--store", ds, "--workers", "1"]).exit_code == 0
    r = CliRunner().invoke(main, ["import", ds, "--store", ds])
    assert r.exit_code == 2 and "is a Parquet dataset" in r.output
    r = CliRunner().invoke(main, ["ingest", SMALL[0], "--db", str(tmp_path / "x.duckdb"),
                                  "--workers", "2"])
    assert r.exit_code == 2 and "give a folder with --store DIR/" in r.output
    r = CliRunner().invoke(main, ["ingest", SMALL[0], "--store", ds, "--cluster", "tcp://127.0.0.1:9"])
    assert r.exit_code == 2 and "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in r.output


class _FailingClient:
    """A client whose tasks all fail: what the coordinator does then."""

    def scheduler_info(self):
        return {"workers": {"a": {}, "b": {}}}

    def submit(self, *args, **kwargs):
        return None

    def gather(self, futures):
        raise RuntimeError("every worker is gone")


def test_per_request_steps_whose_tasks_fail_are_built_by_the_coordinator(small_store, tmp_path):
    from tracekit.pipeline.cluster import reduce
    ds = str(tmp_path / "ds") + "/"
    assert CliRunner().invoke(main, ["ingest", *SMALL, "--store", ds, "--workers", "1"]).exit_code == 0
    shutil.rmtree(os.path.join(ds, "attribution"))
    _, steps, notes = reduce(ds, [], client=_FailingClient())
    assert len(notes) == 1 and "every worker is gone" in notes[0]
    assert {"request_phases", "attribution"} <= {s.table for s in steps if s.built}
    assert_same_store(small_store, ds)


def test_capture_paths_reach_the_workers_absolute(tmp_path, monkeypatch):
    """A worker's working directory is not the caller's: the plan the tasks are
    submitted from holds absolute paths (before: relative ones, and every
    capture failed twice on a cluster)."""
    from tracekit.pipeline.cluster.plan import plan
    monkeypatch.chdir(os.path.dirname(SMALL[0]))
    name = os.path.basename(SMALL[0])
    (tmp_path / "ds").mkdir()
    todo, duplicates = plan(str(tmp_path / "ds"), [(name, {}), (SMALL[0], {})])
    assert todo == [(SMALL[0], {}, 1)] and duplicates == [(SMALL[0], 1)]
