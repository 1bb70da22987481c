"""The multiplexing lab's cells, repeated: protocol x scheduling x hole (issue #27).

    sudo python benchmarks/multiplex.py --rounds 3 --out out/multiplex

Cells: HTTP/2 (h2c over TCP, tracekit.lab.multiplex) FIFO and priority,
each without and with one image segment dropped (FIFO: relative sequence
395,001, in the image's last frame; priority: 216,993, a few image bytes
before where the audio's last chunk went in a lossless run), and HTTP/3
(aioquic, tracekit.lab.multiplex_h3, 2 % random loss). Rounds alternate the
cells. Prints, per cell, the audio stream's median [min, max] over rounds:
last byte sent, complete, deliverable and the client's read (ms from its
ready time), hol_blocking and stream_queueing (ms), on-time seconds, and the
model's audio completion (tracekit.model: the run's own image rate, 10 ms
one way, the server's socket buffer committed before a chunk) for HTTP/2.
"""

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tracekit import model  # noqa: E402
from tracekit.lab import multiplex, multiplex_h3  # noqa: E402
from tracekit.pipeline.analyze import analyze  # noqa: E402
from tracekit.pipeline.h2events import write_h2_events  # noqa: E402
from tracekit.pipeline.logs import load_logs  # noqa: E402
from tracekit.readers.events import read_log  # noqa: E402
from tracekit.store.db import connect  # noqa: E402

CELLS = (("h2", "fifo", None), ("h2", "priority", None), ("h2", "fifo", 395_001),
         ("h2", "priority", 216_993), ("h3", "aioquic", "2%"))


def _logs(cell, files):
    if cell[0] == "h3":
        return [read_log(p) for p in files["client_qlog"] + files["server_qlog"]] + \
            [read_log(files["client.jsonl"])]
    out = []
    for side in ("client", "server"):
        frames = files[f"{side}.pcap"] + ".jsonl"
        write_h2_events(files[f"{side}.pcap"], 9300, frames, side, files["connection"])
        out += [read_log(frames), read_log(files[f"{side}.jsonl"])]
    return out


def _predicted(image_row, mode, sndbuf):
    """The model's audio completion (ms from ready) at the run's own image rate;
    with priority, what the server's socket buffer holds (SO_SNDBUF as the
    kernel set it, from the server's log) goes before a chunk."""
    rate = 400_000 / ((image_row["last_sent_ns"] - image_row["first_sent_ns"]) / 1e9)
    sizes = [400_000] + [969] * 8
    ready = [0.0] + [0.02 * k for k in range(8)]
    pieces = model.link_schedule(sizes, ready, rate, None if mode == "fifo" else [1] + [0] * 8,
                                 committed=sndbuf)
    complete, _ = model.delivery_times(pieces, len(sizes), delay=0.010, order="stream")
    return max(complete[1:]) * 1e3


def _sndbuf(files):
    with open(files["server.jsonl"]) as f:
        return next(json.loads(line)["sndbuf"] for line in f if '"stream_ready"' in line)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=tempfile.mkdtemp())
    a = p.parse_args()
    results = {c: [] for c in CELLS}
    for r in range(a.rounds):
        for i, cell in enumerate(CELLS):
            work = os.path.join(a.out, f"r{r}-c{i}")
            if cell[0] == "h3":
                files = multiplex_h3.record(work, seed=r + 1)
            else:
                files = multiplex.record(work, cell[1], hole=cell[2], play_ms=100)
            con = connect(os.path.join(work, "t.duckdb"))
            load_logs(con, _logs(cell, files))
            analyze(con)
            cur = con.execute("SELECT * FROM streams WHERE read_ns IS NOT NULL ORDER BY stream_id")
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, x)) for x in cur.fetchall()]
            con.close()
            image, audio = rows[0], rows[-1]
            t0 = audio["ready_ns"] or audio["first_sent_ns"]
            ms = {k: (audio[k] - t0) / 1e6 if audio[k] is not None else None
                  for k in ("last_sent_ns", "complete_ns", "deliverable_ns", "read_ns")}
            ms.update(hol=audio["hol_blocking_ns"] / 1e6, queueing=(audio["stream_queueing_ns"] or 0) / 1e6,
                      on_time=audio["on_time_s"],
                      predicted=_predicted(image, cell[1], _sndbuf(files)) if cell[0] == "h2" else None)
            results[cell].append(ms)
    for cell, runs in results.items():
        def fmt(k):
            v = [x[k] for x in runs if x[k] is not None]
            d = 2 if k == "on_time" else 1
            return "-" if not v else f"{statistics.median(v):.{d}f} [{min(v):.{d}f}, {max(v):.{d}f}]"
        print(json.dumps({"cell": cell, **{k: fmt(k) for k in runs[0]}}))
    print("runs under", a.out, glob.glob(os.path.join(a.out, "*"))[:1])


if __name__ == "__main__":
    main()
