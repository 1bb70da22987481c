"""Whether a Parquet file of a dataset is the one its writer wrote: its ends
and footer look like Parquet (`check_parquet`) and its CRC-32 and size are the
ones recorded when it was written (`verify`).

DuckDB writes Parquet without page checksums, so a byte flipped inside a page
that still decodes changes values silently; a file's checksum catches it, and
a valid Parquet file put where another belongs (another capture's table).

Where the sums are (a sum is {"bytes": size, "crc32": "8 hex digits"}):

    DIR/_records/3.json   capture 3's record: "files": {"packets/capture_id=3/
                          part-0.parquet": [sum, ...], ...}, every file of it
    DIR/_sums/requests--part-0.parquet.json
                          a whole table's file, or a per-capture table's rows of
                          no capture (capture_id=0): {"file": ..., "sums": [...]}

More than one sum is accepted only while a file is being replaced (the old
one's and the new one's: a writer killed between the swap and its record
leaves either file whole). A file with no sum recorded (a dataset written
before checksums) is "not checksummed": read, never refused. A file in a
recorded capture's folder that its record does not list is refused (tracekit
would read it).

Cost: CRC-32 (zlib) is ~0.25 ms per MB on one core of a busy machine, less
than reading the file; every reader verifies every file it reads, each time
(docs/reliability.md has the measurements).
"""

import json
import os
import zlib

from ..core.errors import TracekitError

RECORDS = "_records"
SUMS = "_sums"
CHUNK = 1 << 20
HINT = "the dataset is damaged there; move that capture's folder away and ingest its file again"


def of(path):
    """The sum of the file at `path`."""
    crc = size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return {"bytes": size, "crc32": f"{crc:08x}"}


def relative(directory, path):
    """A file's name in the records: its path under the dataset, with '/'."""
    return os.path.relpath(path, directory).replace(os.sep, "/")


def of_folders(directory, folders):
    """{name in the records: [sum]} of the Parquet files in `folders`
    ({folder read: the folder of the dataset it is or will be})."""
    out = {}
    for folder, final in folders.items():
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
            if name.endswith(".parquet"):
                sums = [of(os.path.join(folder, name))]
                out[relative(directory, os.path.join(final, name))] = sums
    return out


def widen(old, new):
    """The files of a record while `new` replaces `old` ({name: [sum]}): both accepted."""
    return {**old, **{name: sums + old.get(name, []) for name, sums in new.items()}}


def settle(old, new):
    """The files of a record once `new` replaced `old`: the new ones' sums, the
    other files' as they were."""
    return {**(old or {}), **new}


def record_files(directory, capture_id, records=None):
    """The files of capture `capture_id`'s record ({name: [sum]}), or None
    (no record, or one written before checksums). `records`: a dict the
    caller keeps to read each record once ({capture_id: files})."""
    if records is not None:
        key = int(capture_id)
        if key not in records:
            records[key] = record_files(directory, key)
        return records[key]
    try:
        with open(os.path.join(directory, RECORDS, f"{int(capture_id)}.json")) as f:
            files = json.load(f).get("files")
    except (OSError, ValueError, AttributeError):
        return None
    return files if isinstance(files, dict) else None


def _sidecar(directory, name):
    return os.path.join(directory, SUMS, name.replace("/", "--") + ".json")


def write_sums(directory, path, sums, temporary):
    """Record the sums accepted for the file `path` (a whole table's, or a rest
    partition's), written at `temporary` and renamed over the old record."""
    name = relative(directory, path)
    os.makedirs(os.path.join(directory, SUMS), exist_ok=True)
    with open(temporary, "w") as f:
        json.dump({"file": name, "sums": sums}, f)
    os.replace(temporary, _sidecar(directory, name))


def accepted(directory, path, records=None):
    """The sums accepted for a file of the dataset: a list (empty: a file no
    record lists), or None when it is not checksummed."""
    name = relative(directory, path)
    parts = name.split("/")
    if len(parts) == 3 and parts[1].startswith("capture_id=") and parts[1][11:] != "0":
        cid = parts[1][11:]
        files = record_files(directory, cid, records) if cid.isdigit() else None
        return None if files is None else files.get(name, [])
    try:
        with open(_sidecar(directory, name)) as f:
            sums = json.load(f).get("sums")
    except (OSError, ValueError, AttributeError):
        return None
    return sums if isinstance(sums, list) else None


def state(directory, path, records=None):
    """("ok" | "not checksummed" | "damaged", what was found) of one file."""
    try:
        check_parquet(path)
    except TracekitError as e:
        return "damaged", str(e).split(f"{path}: ", 1)[-1].split(": the dataset is damaged")[0]
    sums = accepted(directory, path, records)
    if sums is None:
        return "not checksummed", "no checksum recorded"
    got = of(path)
    if got in sums:
        return "ok", f"crc32 {got['crc32']}, {got['bytes']:,} bytes"
    if not sums:
        return "damaged", "a file its capture's record does not list (not written by tracekit)"
    want = sums[0] if isinstance(sums[0], dict) else {}
    size = want.get("bytes")
    return "damaged", (f"its checksum is not the one recorded when it was written "
                       f"(crc32 {got['crc32']}, {got['bytes']:,} bytes; recorded crc32 "
                       f"{want.get('crc32')}, {f'{size:,}' if isinstance(size, int) else size} "
                       f"bytes)")


def verify(directory, path, records=None):
    """Refuse, in one line naming it, a file of the dataset that is not sound
    Parquet or not the file recorded."""
    kind, detail = state(directory, path, records)
    if kind == "damaged":
        raise TracekitError(f"{path}: {detail}: {HINT}")


def refuse_missing(directory, name, capture_ids, found, records=None):
    """Refuse, in one line naming it, a file of table `name` that a record of
    `capture_ids` (or a whole-table record) lists and that is not there: a
    reader would silently go without its rows."""
    want = set()
    for cid in capture_ids:
        files = record_files(directory, cid, records)
        want.update(n for n in files or () if n.startswith(f"{name}/"))
    sums = os.path.join(directory, SUMS)
    for entry in os.listdir(sums) if os.path.isdir(sums) else ():
        if entry.startswith(f"{name}--") and entry.endswith(".json"):
            want.add(entry[:-5].replace("--", "/"))
    gone = sorted(want - {relative(directory, p) for p in found})
    if gone:
        path = os.path.join(directory, *gone[0].split("/"))
        raise TracekitError(f"{path}: missing (its record lists it): the dataset is damaged "
                            f"there; move that capture's folder away and ingest its file again")


def _decoded(path):
    import duckdb
    con = duckdb.connect()
    try:
        con.execute("SELECT sum(hash(t)) FROM read_parquet(?) t", [path]).fetchall()
    except duckdb.Error as e:
        return "damaged", f"cannot be read as Parquet ({str(e).splitlines()[0][:200]})"
    finally:
        con.close()
    return "not checksummed", "no checksum recorded; DuckDB decodes it whole"


def check_parquet(path):
    """Refuse, in one line naming it, a file of the dataset that is not Parquet
    (damaged or replaced from outside): its first and last four bytes and its
    footer's length, before DuckDB reads it."""
    problem = None
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size < 12:
                problem = f"{size} bytes, too short for Parquet"
            else:
                f.seek(0)
                head = f.read(4)
                f.seek(size - 8)
                tail = f.read(8)
                footer = int.from_bytes(tail[:4], "little")
                if head != b"PAR1":
                    problem = f"it begins {head.hex()}, not PAR1"
                elif tail[4:] != b"PAR1":
                    problem = f"it ends {tail[4:].hex()}, not PAR1: cut short or overwritten"
                elif footer > size - 12:
                    problem = f"a footer of {footer:,} bytes in a file of {size:,}"
    except OSError as e:
        problem = f"cannot read: {e.strerror}"
    if problem:
        raise TracekitError(f"{path}: not a Parquet file ({problem}): {HINT}")


def scrub(directory, read):
    """[(path, state, detail)] of every file tracekit reads of the dataset
    (`read`) and of every file a record lists that is not there ("missing").
    A file with no checksum is decoded whole by DuckDB: damaged if it cannot be."""
    out = [(path, *state(directory, path)) for path in sorted(read)]
    out = [(p, *_decoded(p)) if kind == "not checksummed" else (p, kind, detail)
           for p, kind, detail in out]
    names = {relative(directory, p) for p in read}
    listed = set()
    for entry in sorted(os.listdir(os.path.join(directory, RECORDS))
                        if os.path.isdir(os.path.join(directory, RECORDS)) else ()):
        files = record_files(directory, entry[:-5]) if entry[:-5].isdigit() else None
        listed.update(files or ())
    for entry in sorted(os.listdir(os.path.join(directory, SUMS))
                        if os.path.isdir(os.path.join(directory, SUMS)) else ()):
        listed.add(entry[:-5].replace("--", "/"))
    for name in sorted(listed - names):
        out.append((os.path.join(directory, *name.split("/")), "missing",
                    "its record lists it; it is not there"))
    return out
