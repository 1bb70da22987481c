"""Datasets damaged from outside: a file that is not Parquet where a capture's
table belongs (or a whole table's). Readers refuse in one line naming the file
(before: "internal error: ... No magic bytes found" from every command);
writers set the damaged capture aside, and its file can be ingested again."""

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import main

CAPTURES = Path(__file__).parent.parent / "captures"
SMALL = [str(CAPTURES / n) for n in ("http-fresh-vs-persistent.pcap", "udp-echo.pcapng")]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    db = str(root / "s.duckdb")
    assert CliRunner().invoke(main, ["ingest", *SMALL, "--db", db]).exit_code == 0
    assert CliRunner().invoke(main, ["analyze", "--db", db]).exit_code == 0
    r = CliRunner().invoke(main, ["export", "--parquet", str(root / "ds"), "--db", db])
    assert r.exit_code == 0, r.output
    return root / "ds"


def _copy(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("damage", ["text", "cut", "empty"])
def test_a_file_that_is_not_parquet_is_refused_in_one_line(exported, tmp_path, damage):
    ds = _copy(exported, tmp_path / "ds")
    target = ds / "flows" / "capture_id=1" / "part-0.parquet"
    data = target.read_bytes()
    target.write_bytes({"text": b"not a parquet file\n", "cut": data[:-100], "empty": b""}[damage])
    for args in (["sql", "SELECT count(*) FROM flows"], ["sessions"], ["captures"]):
        r = CliRunner().invoke(main, [*args, "--store", str(ds)])
        assert r.exit_code == 2, r.output
        (line,) = r.output.splitlines()
        assert line.startswith(f"tracekit: error: {target}: not a Parquet file ("), line
    target.write_bytes(data)
    whole = ds / "requests" / "part-0.parquet"
    whole.write_bytes(b"PAR1")
    r = CliRunner().invoke(main, ["sql", "SELECT count(*) FROM requests", "--store", str(ds)])
    assert r.exit_code == 2 and f"{whole}: not a Parquet file (4 bytes" in r.output, r.output


def test_a_writer_sets_a_damaged_capture_aside_and_its_file_goes_in_again(exported, tmp_path):
    pytest.importorskip("distributed")
    ds = _copy(exported, tmp_path / "ds")
    (ds / "packets" / "capture_id=1" / "part-0.parquet").write_bytes(b"garbage")
    r = CliRunner().invoke(main, ["ingest", *SMALL, "--store", str(ds), "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert f"{ds}/packets/capture_id=1/part-0.parquet: not a Parquet file" in r.output
    assert "capture folder was moved to" in r.output
    assert "udp-echo.pcapng: already in the dataset as capture 2" in r.output
    assert len(os.listdir(ds / "_damaged")) == 1
    r = CliRunner().invoke(main, ["sql", "SELECT list(file_name ORDER BY file_name), "
                                  "sum(packets) FROM captures", "--store", str(ds),
                                  "--format", "csv"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[1] == '"[\'http-fresh-vs-persistent.pcap\', \'udp-echo.pcapng\']",2141'


def _flip(path, column, where):
    """Flip one byte of `column`'s first data page in a Parquet file: `header`
    a byte of the page header (DuckDB: "TProtocolException: Invalid data", no
    file named), `middle` four bytes mid-chunk (Snappy cannot decompress it)."""
    import pyarrow.parquet as pq
    meta = pq.ParquetFile(path).metadata.row_group(0)
    chunk = next(meta.column(i) for i in range(meta.num_columns)
                 if meta.column(i).path_in_schema == column)
    data = bytearray(path.read_bytes())
    if where == "header":
        data[chunk.data_page_offset + 1] ^= 0xFF
    else:
        middle = chunk.data_page_offset + chunk.total_compressed_size // 2
        data[middle:middle + 4] = bytes(b ^ 0xFF for b in data[middle:middle + 4])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("column, where", [("ts_ns", "header"), ("flow_id", "header"),
                                           ("frame", "middle")])
def test_damage_inside_a_page_is_one_line_naming_the_file(exported, tmp_path, column, where):
    """Magic bytes and footer intact, a page inside broken: DuckDB finds it only
    when it decodes that page, and its message may name no file (before: a
    one-line "internal error: Error: TProtocolException: Invalid data")."""
    ds = _copy(exported, tmp_path / "ds")
    target = ds / "packets" / "capture_id=1" / "part-0.parquet"
    _flip(target, column, where)
    for checked, said in ((True, "its checksum is not the one recorded when it was written"),
                          (False, "cannot be read as Parquet (")):
        if not checked:  # a dataset written before checksums: DuckDB's error, the file named
            _without_checksums(ds)
        for args in (["sql", "SELECT count(*), sum(hash(p)) FROM packets p"],
                     ["import", str(ds), "--db", str(tmp_path / f"i{checked}.duckdb")]):
            store = [] if args[0] == "import" else ["--store", str(ds)]
            r = CliRunner().invoke(main, [*args, *store])
            assert r.exit_code == 2, r.output
            (line,) = r.output.splitlines()
            assert line.startswith(f"tracekit: error: {target}: {said}"), line
            assert line.endswith("move that capture's folder away and ingest its file again"), line


def _without_checksums(ds):
    """Make `ds` a dataset as written before checksums: records without
    "files", no _sums/."""
    import json
    import shutil
    shutil.rmtree(ds / "_sums")
    for record in (ds / "_records").iterdir():
        record.write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items()
                                      if k != "files"}))
    return ds


def test_a_capture_analysed_again_over_a_damaged_page_names_the_file(exported, tmp_path):
    """A writer analysing a capture again (other --dupthresh) reads its packets
    from the dataset: the failure names the file (before: "Error:
    TProtocolException: Invalid data")."""
    pytest.importorskip("distributed")
    ds = _copy(exported, tmp_path / "ds")
    target = ds / "packets" / "capture_id=1" / "part-0.parquet"
    _flip(target, "ts_ns", "header")
    _without_checksums(ds)  # (with them, the writer sets the capture aside first: below)
    r = CliRunner().invoke(main, ["analyze", "--store", str(ds), "--workers", "1",
                                  "--dupthresh", "4"])
    assert r.exit_code == 1, r.output  # capture 2 analysed again, capture 1 failed
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("tracekit: error:")]
    assert f"failed twice and was not analysed: {target}: cannot be read as Parquet (" in line
    assert line.endswith("the next analyze tries it again"), line


def _silent_or_spread(column, where, kind):
    """The flips DuckDB reads without an error (values changed or not: only a
    checksum sees them) and every third other one."""
    _silent_or_spread.n = getattr(_silent_or_spread, "n", 0) + 1
    return not kind.startswith("error") or _silent_or_spread.n % 3 == 0


def test_every_byte_flip_inside_a_page_is_one_line_naming_the_file(exported, tmp_path):
    """The flips of tests/parquet_flips.py (three per column chunk of a packets
    file) through `tracekit sql`: each one line naming the file, exit 2.
    Before: the flips DuckDB decodes gave other values (or the same), exit 0."""
    import parquet_flips
    ds = _copy(exported, tmp_path / "ds")
    found = parquet_flips.run(ds, only=_silent_or_spread)
    kinds = {k for _, _, k, _ in found}
    assert "different values, no error" in kinds and "same values" in kinds, kinds
    assert any(k.startswith("error") for k in kinds), kinds
    missed = [(c, w, k) for c, w, k, named in found if not named]
    assert not missed, missed
    assert len(found) >= 50


def test_a_valid_parquet_file_put_where_another_belongs_is_refused(exported, tmp_path):
    """Capture 2's packets file copied over capture 1's (sound Parquet, the
    same columns, wrong rows): before, capture 1 read capture 2's 10 packets."""
    ds = _copy(exported, tmp_path / "ds")
    target = ds / "packets" / "capture_id=1" / "part-0.parquet"
    target.write_bytes((ds / "packets" / "capture_id=2" / "part-0.parquet").read_bytes())
    r = CliRunner().invoke(main, ["sql", "SELECT count(*) FROM packets", "--store", str(ds)])
    assert r.exit_code == 2, r.output
    (line,) = r.output.splitlines()
    assert line.startswith(f"tracekit: error: {target}: its checksum is not the one recorded"), line
    r = CliRunner().invoke(main, ["check", str(ds)])
    assert r.exit_code == 2, r.output
    bad = [ln for ln in r.output.splitlines() if not ln.startswith("ok ")]
    assert bad[0].startswith(f"damaged          {target}  (its checksum"), bad
    assert bad[1].endswith("files: 35 ok, 1 damaged, 0 missing, 0 not checksummed"), bad
    # a file no record lists, in a recorded capture's folder (tracekit would read it)
    target.write_bytes((exported / "packets" / "capture_id=1" / "part-0.parquet").read_bytes())
    extra = ds / "flows" / "capture_id=1" / "part-1.parquet"
    extra.write_bytes((ds / "flows" / "capture_id=2" / "part-0.parquet").read_bytes())
    r = CliRunner().invoke(main, ["sessions", "--store", str(ds)])
    assert r.exit_code == 2 and f"{extra}: a file its capture's record does not list" in r.output


def test_check_lists_missing_files_and_reads_a_dataset_without_checksums(exported, tmp_path):
    """A recorded file gone is "missing" (exit 2); a dataset written before
    checksums (records without "files", no _sums/) is read as before, each
    file "not checksummed", exit 0."""
    ds = _copy(exported, tmp_path / "ds")
    r = CliRunner().invoke(main, ["check", str(ds)])
    assert r.exit_code == 0 and r.output.splitlines()[-1] == (
        "36 files: 36 ok, 0 damaged, 0 missing, 0 not checksummed"), r.output
    (ds / "tcp_analysis" / "capture_id=1" / "part-0.parquet").unlink()
    (ds / "requests" / "part-0.parquet").unlink()
    r = CliRunner().invoke(main, ["check", str(ds)])
    assert r.exit_code == 2, r.output
    missing = [ln.split()[1] for ln in r.output.splitlines() if ln.startswith("missing")]
    assert missing == [str(ds / "requests" / "part-0.parquet"),
                       str(ds / "tcp_analysis" / "capture_id=1" / "part-0.parquet")], r.output
    # a reader refuses too (it would go on without those rows), in one line naming one
    r = CliRunner().invoke(main, ["sql", "SELECT count(*) FROM tcp_analysis", "--store", str(ds)])
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    named = r.output.split(": missing (its record lists it): ")[0].removeprefix("tracekit: error: ")
    assert named in missing, r.output
    old = _without_checksums(_copy(exported, tmp_path / "old"))
    query = ["sql", "SELECT count(*), sum(hash(p)) FROM packets p", "--format", "csv"]
    new = CliRunner().invoke(main, [*query, "--store", str(exported)])
    r = CliRunner().invoke(main, [*query, "--store", str(old)])
    assert r.exit_code == 0 and r.output == new.output, (r.output, new.output)
    r = CliRunner().invoke(main, ["check", str(old)])
    assert r.exit_code == 0 and r.output.splitlines()[-1] == (
        "36 files: 0 ok, 0 damaged, 0 missing, 36 not checksummed"), r.output
    # there, check decodes each file whole: what DuckDB cannot read is damaged
    target = old / "packets" / "capture_id=1" / "part-0.parquet"
    _flip(target, "ts_ns", "header")
    r = CliRunner().invoke(main, ["check", str(old)])
    assert r.exit_code == 2 and r.output.splitlines()[-1] == (
        "36 files: 0 ok, 1 damaged, 0 missing, 35 not checksummed"), r.output
    assert f"damaged          {target}  (cannot be read as Parquet (" in r.output, r.output


def test_a_reader_of_every_table_reads_each_capture_record_once(exported, monkeypatch):
    # every file is verified against its capture's record, and every table
    # checks that no recorded file is missing: with a record read per file and
    # per table, opening a dataset of N captures read ~2 x tables x N JSON files
    import builtins

    import duckdb

    from tracekit.store import dataset

    opened = []
    real_open = builtins.open

    def counting(path, *a, **k):
        if "_records" in str(path):
            opened.append(os.path.basename(str(path)))
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", counting)
    con = duckdb.connect()
    dataset.open_views(con, str(exported))
    monkeypatch.setattr(builtins, "open", real_open)
    assert sorted(opened) == ["1.json", "2.json"]
    (flows,), = con.execute("SELECT count(*) FROM flows").fetchall()
    assert flows > 0
