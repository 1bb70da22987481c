"""Byte flips inside one Parquet file of a dataset, the file's ends and footer
left sound: three per column chunk -- a byte of its first data page's header,
four bytes in the middle of the chunk, the chunk's last byte -- so 159 for
the 53 columns of a packets file.

What DuckDB alone makes of each (reading the file whole, as
store/dataset.unreadable does): an error (Snappy cannot decompress,
"TProtocolException: Invalid data", other), the same values (a byte nothing
reads), or different values with no error -- the silent case that only the
checksum recorded with the file catches. What tracekit makes of each: the
`sql` command over the dataset, one line naming the file and exit 2, or not.

    python tests/parquet_flips.py DATASET [TABLE/capture_id=N/part-0.parquet]

prints the table (tests/test_dataset_checksums.py runs it in CI).
"""

import os
import sys

WHERE = ("header", "middle", "last")


def positions(path):
    """[(column, where, offsets)] of the flips of the file at `path`."""
    import pyarrow.parquet as pq
    meta = pq.ParquetFile(path).metadata
    out = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for i in range(group.num_columns):
            chunk = group.column(i)
            start = chunk.dictionary_page_offset or chunk.data_page_offset
            middle = start + chunk.total_compressed_size // 2
            out += [(chunk.path_in_schema, "header", [chunk.data_page_offset + 1]),
                    (chunk.path_in_schema, "middle", list(range(middle, middle + 4))),
                    (chunk.path_in_schema, "last", [start + chunk.total_compressed_size - 1])]
    return out


def flipped(data, offsets):
    data = bytearray(data)
    for at in offsets:
        data[at] ^= 0xFF
    return bytes(data)


def duckdb_reads(path):
    """(rows, sum of row hashes) of the file, or the first line of DuckDB's error."""
    import duckdb
    con = duckdb.connect()
    try:
        return con.execute("SELECT count(*), sum(hash(t)) FROM read_parquet(?) t",
                           [str(path)]).fetchall()[0]
    except duckdb.Error as e:
        return str(e).splitlines()[0]
    finally:
        con.close()


def kind(read, sound):
    """What DuckDB made of a flip: its reading `read` against the sound file's."""
    if isinstance(read, str):
        low = read.lower()
        return ("error: Snappy" if "snappy" in low else
                "error: TProtocolException" if "tprotocolexception" in low else "error: other")
    return "same values" if read == sound else "different values, no error"


def tracekit_names(directory, path):
    """Whether `tracekit sql` over the dataset refuses it in one line naming `path`, exit 2."""
    from click.testing import CliRunner

    from tracekit.cli import main
    r = CliRunner().invoke(main, ["sql", "SELECT count(*), sum(hash(p)) FROM packets p",
                                  "--store", str(directory)])
    lines = r.output.splitlines()
    return r.exit_code == 2 and len(lines) == 1 and lines[0].startswith(
        f"tracekit: error: {path}: ")


def run(directory, name="packets/capture_id=1/part-0.parquet", only=None):
    """[(column, where, DuckDB's kind, tracekit named the file)] for every flip
    (or those `only` keeps: a function of (column, where, kind)); the file is
    put back as it was."""
    path = os.path.join(directory, *name.split("/"))
    with open(path, "rb") as f:
        sound = f.read()
    reference = duckdb_reads(path)
    out = []
    try:
        for column, where, offsets in positions(path):
            with open(path, "wb") as f:
                f.write(flipped(sound, offsets))
            seen = kind(duckdb_reads(path), reference)
            if only is None or only(column, where, seen):
                out.append((column, where, seen, tracekit_names(directory, path)))
    finally:
        with open(path, "wb") as f:
            f.write(sound)
    return out


def main(argv):
    from collections import Counter
    found = run(*argv[1:3])
    print(f"{len(found)} flips of {argv[2] if len(argv) > 2 else 'packets/capture_id=1'}")
    print("| DuckDB alone | flips | tracekit: one line naming the file, exit 2 |")
    print("|---|---:|---:|")
    for k, n in sorted(Counter(f[2] for f in found).items()):
        print(f"| {k} | {n} | {sum(1 for f in found if f[2] == k and f[3])} |")
    print(f"| all | {len(found)} | {sum(1 for f in found if f[3])} |")


if __name__ == "__main__":
    main(sys.argv)
