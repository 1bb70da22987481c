"""The `multiplexing` workload of `tracekit lab run` (issue #27): an image and
an audio stream of timed chunks on one connection, HTTP/2 over TLS 1.3 on TCP
(tracekit.lab.multiplex) or HTTP/3 over QUIC (the server of
tracekit.lab.multiplex_quic, the client of tracekit.lab.multiplex_h3), sent
FIFO or with the audio first. Settings (each may be a factor or come with a
level): protocol ("h2" or "h3"), scheduling ("fifo" or "priority"),
image_bytes (60,000), chunks (8), chunk_ms (20), play_ms (200), committed
and piece (what the server hands on ahead of a chunk: _sender_args), and
the path's (loss_down makes the holes; the forwarder's drops.jsonl says
which). HTTP/2 only: hole_fifo / hole_priority, the relative TCP sequence
number of a server byte whose segment the path drops once under that
scheduling (hole_fifo_times / hole_priority_times: its first n copies; the
forwarder's scripted drop is TCP only).

Per run: HTTP/2 -- both ends' captures (whole packets), the client's key
log, both logs, and the frames `tracekit h2-events --keylog` reads from each
capture (client-frames.jsonl, server-frames.jsonl: the `streams` table's
pieces; listed as `logs` in the manifest, ingested with the run). HTTP/3 --
both qlogs (the pieces), the server's log and the client's. The client's
log has `stream_read` per stream: when its library handed it the stream's
end, the ground truth of `streams.deliverable_ns`.
"""

import dataclasses
import glob
import json
import os
import subprocess
import sys
import time

from ..core.errors import TracekitError
from .record import running
from .wan import SERVER_ADDR, EmulatedPath

H2_PORT = 9300
H3_PORT = 4433
SNAPLEN = 1600   # whole packets: the TLS records are decrypted


def _settings(s):
    return {"image_bytes": int(s.get("image_bytes", 60_000)), "chunks": int(s.get("chunks", 8)),
            "chunk_ms": float(s.get("chunk_ms", 20)), "play_ms": float(s.get("play_ms", 200))}


def _sender_args(protocol, s):
    """What the sender may hand on ahead of a chunk (`committed`, 8,192 bytes):
    the server writes the next image piece (`piece`, 4,096 bytes) only while
    fewer than that are unacknowledged -- HTTP/2: in the TCP socket (SIOCOUTQ),
    HTTP/3: of the image stream in aioquic."""
    committed = ["--committed", str(int(s.get("committed", 8192)))]
    if protocol == "h2":
        return committed + ["--piece", str(int(s.get("piece", 4096)))]
    return committed


def _server_args(cfg):
    return [w for k, v in cfg.items() for w in (f"--{k.replace('_', '-')}", str(v))]


def _run_h2(path, s, cfg, out, files, run_id):
    from ..pipeline.h2events import write_h2_events
    from .experiment import _recording
    from .h3 import private_file
    files["keylog"] = os.path.join(out, "keys.log")
    private_file(files["keylog"]).close()
    me = [sys.executable, "-m", "tracekit.lab.multiplex"]
    common = ["--addr", SERVER_ADDR, "--port", str(H2_PORT), "--connection", run_id]
    with running(path.server, me + ["server", "--log", files["server_log"], "--mode",
                                    s["scheduling"], "--tls", *common, *_server_args(cfg),
                                    *_sender_args("h2", s)],
                 "multiplex server") as server:
        with _recording(path, files, out, SNAPLEN):
            subprocess.run(path.client(me + ["client", "--log", files["client_log"], *common,
                                             "--keylog", files["keylog"]]),
                           check=True, timeout=60)
        server.wait(timeout=30)
    files["logs"] = []
    for side in ("client", "server"):
        frames = os.path.join(out, f"{side}-frames.jsonl")
        write_h2_events(files[f"{side}_capture"], H2_PORT, frames, side, run_id,
                        keylog=files["keylog"])
        files["logs"].append(frames)


def _whole(pattern):
    """Whether a qlog matching `pattern` is written through (a whole JSON document)."""
    for path in glob.glob(pattern):
        try:
            with open(path) as f:
                json.load(f)
            return True
        except (OSError, ValueError):
            pass
    return False


def _run_h3(path, s, cfg, out, files, run_id):
    qlogs = {side: os.path.join(out, f"{side}-qlog") for side in ("client", "server")}
    for k in ("client_capture", "server_capture"):
        files.pop(k)   # the qlogs are the evidence (QUIC is encrypted; no key log here)
    with running(path.server, [sys.executable, "-m", "tracekit.lab.multiplex_quic", "--addr",
                               SERVER_ADDR, "--port", str(H3_PORT), "--qlog-dir", qlogs["server"],
                               "--log", files["server_log"], "--mode", s["scheduling"],
                               *_server_args(cfg), *_sender_args("h3", s)],
                 "HTTP/3 multiplex server"):
        subprocess.run(path.client([
            sys.executable, "-m", "tracekit.lab.multiplex_h3", "--addr", SERVER_ADDR,
            "--port", str(H3_PORT), "--qlog-dir", qlogs["client"], "--log", files["client_log"],
            "--paths", "--audio-after-ms", "0"]), check=True, timeout=60)
        deadline = time.monotonic() + 10   # the server writes its qlog when the connection drained
        while not _whole(os.path.join(qlogs["server"], "*.qlog")):
            if time.monotonic() > deadline:
                raise TracekitError(f"{qlogs['server']}: the HTTP/3 server wrote no whole qlog "
                                    f"within 10 s of the client's end")
            time.sleep(0.05)
    files["qlogs"] = [os.path.join(d, q) for d in qlogs.values()
                      for q in sorted(os.listdir(d)) if q.endswith(".qlog")]


def run_multiplexing(spec, s, trial, order, combo, out, files, pspec, run_id, started):
    from .experiment import _manifest, _tune
    protocol, scheduling = s.get("protocol", "h2"), s.get("scheduling", "fifo")
    if protocol not in ("h2", "h3") or scheduling not in ("fifo", "priority"):
        raise TracekitError(f"the multiplexing workload runs protocol h2 or h3 and scheduling "
                            f"fifo or priority, not {protocol!r} and {scheduling!r}")
    s = {**s, "protocol": protocol, "scheduling": scheduling}
    cfg = _settings(s)
    hole = s.get(f"hole_{scheduling}") if protocol == "h2" else None
    if hole:   # one image segment dropped (once, or its first n copies) where it holds the audio
        times = int(s.get(f"hole_{scheduling}_times", 1))   # back (TCP only)
        pspec = dataclasses.replace(pspec, down=dataclasses.replace(
            pspec.down, drop_segments=((int(hole), times),)))
    with EmulatedPath(pspec, out) as path:
        _tune(path, s)
        (_run_h2 if protocol == "h2" else _run_h3)(path, s, cfg, out, files, run_id)
    files["drop_log"] = path.drop_log
    manifest = _manifest(spec, s, trial, order, combo, pspec, None,
                         {k: v for k, v in files.items() if k not in ("logs", "qlogs")},
                         path, started, run_id,
                         {"name": "multiplexing", "protocol": protocol, "scheduling": scheduling,
                          **cfg, "chunk_bytes": 960})
    for key in ("logs", "qlogs"):
        if key in files:
            manifest["files"][key] = [os.path.relpath(p, out) for p in files[key]]
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest
