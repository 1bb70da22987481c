"""The image and the audio of tracekit.lab.multiplex on one HTTP/3 connection
(aioquic; tracekit.lab.h3's server): per-stream delivery, for the contrast
with HTTP/2's one byte stream. Needs aioquic (pip install 'tracekit[lab]').

The client asks for /bytes/<image> at once and for /bytes/<audio> `--audio-after-ms`
later, and logs `stream_read` (connection `qlog:<ODCID>`, the name the
`streams` table gives the connection's qlog) when aioquic hands it a
stream's end: the ground truth of `streams.deliverable_ns`. aioquic sends
the streams' data in its own order (it has no priorities); the path's
random loss (seeded) makes the holes, and the server's and the client's
qlogs say where they were.
"""

import argparse
import asyncio
import json
import os
import ssl
import sys
import time


async def _fetch(addr, port, qlog_dir, log_path, image, audio, audio_after_ms):
    from aioquic.asyncio import QuicConnectionProtocol, connect
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import DataReceived
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.logger import QuicFileLogger

    class Client(QuicConnectionProtocol):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.h3 = H3Connection(self._quic)
            self.done = {}

        def quic_event_received(self, event):
            now = time.time_ns()
            for ev in self.h3.handle_event(event):
                if isinstance(ev, DataReceived) and ev.stream_ended and ev.stream_id in self.done:
                    self.done[ev.stream_id].set_result(now)

        async def get(self, path):
            sid = self._quic.get_next_available_stream_id()
            self.done[sid] = asyncio.get_running_loop().create_future()
            self.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                       (b":authority", addr.encode()),
                                       (b":path", path.encode())], end_stream=True)
            self.transmit()
            return sid, await self.done[sid]

    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE,
                               quic_logger=QuicFileLogger(qlog_dir))
    async with connect(addr, port, configuration=config, create_protocol=Client) as client:
        await client.wait_connected()
        name = "qlog:" + client._quic.original_destination_connection_id.hex()
        first = asyncio.ensure_future(client.get(image))
        await asyncio.sleep(audio_after_ms / 1000)
        second = asyncio.ensure_future(client.get(audio))
        reads = await asyncio.gather(first, second)
    with open(log_path, "a") as f:
        for sid, ts in reads:
            f.write(json.dumps({"ts": ts, "kind": "stream_read", "connection": name,
                                "direction": "s2c", "stream_id": str(sid)}) + "\n")


def record(workdir, loss=0.02, seed=1, rate_mbps=20.0, delay_ms=10.0, port=4433,
           image=400_000, audio=7_680, audio_after_ms=60.0):
    """One run over an EmulatedPath (root); returns the client's log and both qlogs."""
    import glob
    import subprocess

    from .record import running
    from .wan import SERVER_ADDR, Direction, EmulatedPath, PathSpec
    os.makedirs(workdir, exist_ok=True)
    spec = PathSpec(up=Direction(delay_ms), seed=seed,
                    down=Direction(delay_ms, rate_mbps=rate_mbps, loss=loss))
    qlogs = {side: os.path.join(workdir, f"{side}-qlog") for side in ("client", "server")}
    out = {"client.jsonl": os.path.join(workdir, "client.jsonl")}
    with EmulatedPath(spec, workdir) as path:
        with running(path.server, [sys.executable, "-m", "tracekit.lab.h3", "server", "--addr",
                                   SERVER_ADDR, "--port", str(port), "--qlog-dir", qlogs["server"]],
                     "HTTP/3 server"):
            subprocess.run(path.client([
                sys.executable, "-m", "tracekit.lab.multiplex_h3", "--addr", SERVER_ADDR,
                "--port", str(port), "--qlog-dir", qlogs["client"], "--log", out["client.jsonl"],
                "--image", str(image), "--audio", str(audio),
                "--audio-after-ms", str(audio_after_ms)]), check=True, timeout=60)
            deadline = time.monotonic() + 5   # the server writes its qlog when the connection drained
            while not glob.glob(os.path.join(qlogs["server"], "*.qlog")) and time.monotonic() < deadline:
                time.sleep(0.05)
    for side, d in qlogs.items():
        out[f"{side}_qlog"] = sorted(glob.glob(os.path.join(d, "*.qlog")))
    out["drops.jsonl"] = path.drop_log
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tracekit.lab.multiplex_h3")
    p.add_argument("--addr", required=True)
    p.add_argument("--port", type=int, default=4433)
    p.add_argument("--qlog-dir", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--image", type=int, default=400_000)
    p.add_argument("--audio", type=int, default=7_680)
    p.add_argument("--audio-after-ms", type=float, default=60.0)
    p.add_argument("--paths", action="store_true",
                   help="ask for /image and /audio (tracekit.lab.multiplex_quic's server) "
                        "instead of /bytes/IMAGE and /bytes/AUDIO")
    a = p.parse_args(argv)
    os.makedirs(a.qlog_dir, exist_ok=True)
    image, audio = ("/image", "/audio") if a.paths else (f"/bytes/{a.image}", f"/bytes/{a.audio}")
    asyncio.run(_fetch(a.addr, a.port, a.qlog_dir, a.log, image, audio, a.audio_after_ms))


if __name__ == "__main__":
    sys.exit(main())
