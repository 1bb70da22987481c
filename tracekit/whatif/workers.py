"""A replay's draws in worker processes. Each draw of a replay is its own:
its own random stream (seeded by the seed, the connection and the draw)
and its own sender, so the connections of a replay can be replayed in any
process, in any order, and give the same numbers as one process does. A
replay of 40 transfers or more is cut into chunks of connections and
draws, replayed by as many processes as this one may run on
(`TRACEKIT_WORKERS` sets how many; 1: none), the same processes for every
replay of a command.

A worker runs with the whatif modules' constants as this process has them
(a rule switched off here is off there), leaves Ctrl-C to this process,
and does not run this process's main script again (_main_hidden).
"""

import atexit
import concurrent.futures
import contextlib
import importlib
import multiprocessing
import os
import signal
import sys
from concurrent.futures.process import BrokenProcessPool

# fewer run here: a transfer takes 1-3 ms, a round of the workers ~2 ms (0.3 s
# to start them, once a command)
MIN_TRANSFERS = 40
CHUNKS_PER_WORKER = 4  # connections differ in cost: more chunks than workers balance them

_pool = None
_progress = None  # the command's fn(transfers replayed), if it shows progress


def on_progress(fn):
    """Call fn(transfers) as a replay's tasks finish, with how many transfers
    they replayed (None: no more). A bulk response of 60 MB is ~40,000
    segments a transfer, about 1.5 s of replay each: minutes in all."""
    global _progress
    _progress = fn


def _done(transfers):
    if _progress is not None:
        _progress(transfers)


def count():
    """How many processes replays may use: TRACEKIT_WORKERS, else the CPUs this
    process may run on."""
    stated = os.environ.get("TRACEKIT_WORKERS", "").strip()
    if stated.isdigit() and int(stated) > 0:
        return int(stated)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cuts(draws, connections):
    """Draws of one connection a task holds: all of them, unless there are
    fewer connections than chunks to share out."""
    pieces = -(-count() * CHUNKS_PER_WORKER // max(connections, 1))
    return max(1, -(-draws // pieces))


def starmap(fn, tasks, transfers):
    """[fn(*task) for task in tasks], in order; in worker processes when the
    tasks hold `transfers` or more transfers to replay and more than one
    process may run. fn is a module-level function (workers import it). A
    worker that dies (killed) leaves the tasks not yet back to this process."""
    n = count()
    each = transfers / max(len(tasks), 1)  # (for the progress: tasks differ little)
    if (n < 2 or len(tasks) < 2 or transfers < MIN_TRANSFERS
            or multiprocessing.current_process().daemon):  # (a daemon may not start processes)
        return _here(fn, tasks, each)
    size = -(-len(tasks) // (n * CHUNKS_PER_WORKER))
    chunks = [tasks[i:i + size] for i in range(0, len(tasks), size)]
    now = constants()
    pool = _workers(n)
    futures, out = [], []
    try:
        with _main_hidden():  # (a task submitted may start a worker)
            for chunk in chunks:  # (a worker may die already while they are submitted)
                futures.append(pool.submit(_run, fn, now, chunk))
        for f, chunk in zip(futures, chunks):
            out += f.result()
            _done(each * len(chunk))
        return out
    except BrokenProcessPool:
        _stop()  # (the chunks already back are kept: the rest, in order, here)
        return out + _here(fn, tasks[len(out):], each)
    except BaseException:
        for f in futures:
            f.cancel()
        raise


def _here(fn, tasks, each):
    out = []
    for task in tasks:
        out.append(fn(*task))
        _done(each)
    return out


def _workers(n):
    global _pool
    if _pool is not None and _pool[0] != n:
        _stop()
    if _pool is None:
        # spawn: a fresh interpreter, not a fork of one running DuckDB's threads
        _pool = n, concurrent.futures.ProcessPoolExecutor(
            n, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_starts)
    return _pool[1]


def _worker_starts():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (Ctrl-C is the command's)
    os.environ["TRACEKIT_WORKERS"] = "1"  # (a worker starts no workers of its own)


@contextlib.contextmanager
def _main_hidden():
    """A spawned process runs this one's main script again (as __mp_main__)
    before its task: a user's script that calls the engine at its top level,
    without `if __name__ == "__main__"`, would run once more in each worker.
    The workers need none of it (their tasks are tracekit's functions), so
    it is hidden from them while they start."""
    main = sys.modules["__main__"]
    kept = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    if "__spec__" in kept:
        main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.update(kept)


@atexit.register
def _stop():
    """The workers ended (at exit: while this interpreter still runs, else
    their executor is collected amid its teardown and says so on stderr)."""
    global _pool
    if _pool is not None:
        _pool[1].shutdown(cancel_futures=True)
        _pool = None


def constants():
    """{(module, NAME): value} of the whatif modules' upper-case constants."""
    out = {}
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(__package__ + "."):
            continue
        for key, value in vars(module).items():
            if key.isupper() and isinstance(value, (bool, int, float, str)):
                out[name, key] = value
    return out


def _run(fn, given, chunk):
    for (name, key), value in given.items():
        setattr(importlib.import_module(name), key, value)
    return [fn(*task) for task in chunk]
