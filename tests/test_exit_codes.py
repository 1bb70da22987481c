"""The exit-status table of docs/guide.md ("Exit statuses"), each row run:
0 ok, 2 usage or bad input, 3 internal error here (in process); 1 (a Dask
run that failed in part) in tests/test_cluster.py, 130 (Ctrl-C) and 141
(broken pipe) in tests/test_faults.py, which need a real process and signal.
The table in the guide is checked against the constants the CLI exits with."""

import re
from pathlib import Path

from click.testing import CliRunner

from tracekit.cli import common, main

ROOT = Path(__file__).parent.parent
SAMPLE = str(ROOT / "captures" / "udp-echo.pcapng")


def test_ok_usage_bad_input_and_internal_error(tmp_path, monkeypatch):
    db = str(tmp_path / "s.duckdb")
    run = CliRunner().invoke
    assert run(main, ["ingest", SAMPLE, "--db", db]).exit_code == common.EXIT_OK
    r = run(main, ["captures", "--no-such-option", "--db", db])
    assert r.exit_code == common.EXIT_USAGE == 2, r.output
    r = run(main, ["ingest", str(tmp_path / "missing.pcap"), "--db", db])
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1, r.output

    import tracekit.api

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")
    monkeypatch.setattr(tracekit.api, "open", broken)
    r = run(main, ["sql", "SELECT 1", "--db", db])
    assert r.exit_code == common.EXIT_INTERNAL == 3, r.output
    (line,) = r.output.splitlines()
    assert line.startswith("tracekit: internal error: ZeroDivisionError: a bug (run with --debug")


def test_the_guide_has_one_table_of_the_statuses_the_cli_uses():
    guide = (ROOT / "docs" / "guide.md").read_text()
    section = guide.split("### Exit statuses", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| (\d+) \| ", section, re.M)
    want = {v for k, v in vars(common).items() if k.startswith("EXIT_")}
    assert {int(k) for k in rows} == want == {0, 1, 2, 3, 130, 141}
    assert guide.count("### Exit statuses") == 1


def test_the_process_leaves_without_teardown_yet_runs_atexit_and_keeps_the_status(tmp_path):
    """`tracekit` (cli.app.run) ends with os._exit after the atexit handlers
    and a flush: the store is closed (no WAL left, every row there), the
    status is the command's (0, 2), what was printed is all there, an atexit
    handler ran -- and an ingest never imported numpy.ma (np.unique's import,
    ~10 ms of start-up; the readers use core.arrays.distinct)."""
    import subprocess
    import sys

    import duckdb

    db = tmp_path / "s.duckdb"
    marker = tmp_path / "atexit.txt"
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').write(str('numpy.ma' in sys.modules)))\n"
        "sys.argv = ['tracekit'] + sys.argv[1:]\n"
        "from tracekit.cli import run\n"
        "run()\n")
    ok = subprocess.run([sys.executable, "-c", code, "ingest", SAMPLE, "--db", str(db)],
                        capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert "ingested as capture 1" in ok.stdout and ok.stdout.endswith("\n")
    assert marker.read_text() == "False"
    assert not (tmp_path / "s.duckdb.wal").exists()
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM store.packets").fetchone()[0] > 0
    bad = subprocess.run([sys.executable, "-c", code, "ingest", str(tmp_path / "missing.pcap"),
                          "--db", str(db)], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and not bad.stdout, bad.stderr
    rows = subprocess.run([sys.executable, "-m", "tracekit.cli", "sql", "--db", str(db),
                           "SELECT count(*) AS n FROM packets", "--format", "csv"],
                          capture_output=True, text=True, cwd=ROOT)
    assert rows.returncode == 0 and rows.stdout.splitlines()[0] == "n", rows.stderr
    assert int(rows.stdout.splitlines()[1]) > 0
