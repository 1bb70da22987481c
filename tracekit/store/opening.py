"""A store opened on a thread while the caller goes on (ingest's start-up).

`tracekit ingest` imports its modules (numpy, pyarrow, the readers and
decoders: ~0.1 s) before it needs the store, and opening a store costs
~40 ms more: DuckDB's instance (its built-in extensions' functions
registered, ~15-24 ms even for a store in memory), the tables and views
created, the recovery check. Nearly all of that runs in DuckDB with the
GIL released, so the store is opened on a thread first and the imports
run beside it. On the 200 k slice, with the CLI's lazy rooms: 0.589 ->
0.555 s wall, the CPU time the same (a script doing the same, median of 9
alternated runs, quiet machine); the process's timeline: its first append
starts at 325 ms instead of 378. Both changes together, `compare.py
--before`: 0.67 -> 0.60 s (2026-12-05 08:44, load 0.47, median of 9).
(The pipeline's imports now run with the cyclic collector on, which the
CLI kept out of its own imports: ~12 ms of CPU more, 69 young
collections instead of 46.)

The connection, or `connect`'s error, is taken where `connect` was
called before (`result`), so errors come in the same order; a caller that
fails before it takes the connection `discard`s it, and a store the
opening created is removed again.
"""

import os
import threading

from .db import connect, remove_store


class Opening(threading.Thread):
    def __init__(self, path):
        super().__init__(daemon=True, name="tracekit-open")
        self.path = path
        self.new = not os.path.exists(path)  # (before the thread creates it)
        self.con = None
        self.error = None
        self.start()

    def run(self):
        try:
            self.con = connect(self.path)
        except BaseException as e:  # raised by result()
            self.error = e

    def result(self):
        """The open connection, the caller's from now on (`discard` leaves it
        alone); connect's error, if it failed, raised here."""
        self.join()
        if self.error is not None:
            raise self.error
        con, self.con, self.new = self.con, None, False
        return con

    def discard(self):
        """Close the connection unused; a store it created is removed again."""
        self.join()
        if self.con is not None:
            self.con.close()
            self.con = None
        if self.new:
            remove_store(self.path)
