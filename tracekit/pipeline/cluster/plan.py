"""A dataset's capture ids, chosen before any task runs, and its one-writer lock.

Ids follow the dataset's last in the order the files were given; a file
already published (same SHA-256) is a duplicate; a file planned by a run
that did not publish it keeps its id (`_plan.json`), so a rerun after a
failure makes the rows a single store would hold.
"""

import fcntl
import hashlib
import json
import os

from ...core.errors import TracekitError

PLAN = "_plan.json"
LOCK = ".lock"


class Lock:
    def __init__(self, directory):
        os.makedirs(directory, exist_ok=True)
        self.f = open(os.path.join(directory, LOCK), "a")
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.f.close()
            raise TracekitError(f"{directory} is being written by another tracekit process; "
                                f"wait for it to finish") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def _digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as e:
        raise TracekitError(f"{path}: cannot read: {e.strerror}") from None


def _stored_captures(directory):
    """{sha256: capture_id} of the captures published in the dataset (read from
    their folders: a run killed before its manifest still published them)."""
    from ...store.dataset import files, quote

    found = files(directory, "captures", True)
    if not found:
        return {}
    import duckdb
    con = duckdb.connect()
    try:
        listed = "[" + ", ".join(quote(f) for f in found) + "]"
        return dict(con.execute(
            f"SELECT sha256, capture_id FROM read_parquet({listed}, hive_partitioning = true, "
            f"hive_types = {{'capture_id': INTEGER}})").fetchall())
    finally:
        con.close()


def read_plan(directory):
    try:
        with open(os.path.join(directory, PLAN)) as f:
            return {k: int(v) for k, v in json.load(f).items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise TracekitError(f"{directory}/{PLAN}: unreadable ({e}); remove it to plan anew") from None


def write_plan(directory, plan):
    part = os.path.join(directory, PLAN + ".new")
    with open(part, "w") as f:
        json.dump(plan, f, indent=1)
    os.replace(part, os.path.join(directory, PLAN))


def plan(directory, items):
    """[(path, labels)] -> ([(absolute path, labels, capture_id)] to ingest, duplicates):
    ids in the order given, after the dataset's last; a file planned by an
    earlier run that did not publish it keeps its id."""
    stored = _stored_captures(directory)
    planned = {k: v for k, v in read_plan(directory).items() if k not in stored}
    nxt = max([0, *stored.values(), *planned.values()]) + 1
    todo, duplicates, seen = [], [], {}
    for path, labels in items:
        # absolute here: a worker's working directory is not the caller's (a
        # relative path failed on every worker, twice)
        path = os.path.abspath(path)
        digest = _digest(path)
        if digest in stored or digest in seen:
            duplicates.append((path, stored.get(digest) or seen[digest]))
            continue
        if digest not in planned:
            planned[digest] = nxt
            nxt += 1
        seen[digest] = planned[digest]
        todo.append((path, labels, planned[digest]))
    write_plan(directory, planned)
    return todo, duplicates
