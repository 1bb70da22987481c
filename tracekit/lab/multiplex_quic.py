"""The server of tracekit.lab.multiplex's two streams on HTTP/3 (aioquic), with
the sender's schedule chosen: FIFO or the audio first (issue #27).

    python -m tracekit.lab.multiplex_quic --addr A --port P --qlog-dir DIR --log server.jsonl \\
        --mode fifo --image-bytes 60000 --chunks 8 --chunk-ms 20 --play-ms 200

The client (tracekit.lab.multiplex_h3 with `--paths`) asks for /image and
/audio at once; when both requests are in (t0) the server logs stream_ready
and stream_chunk as tracekit.lab.multiplex does (connection `qlog:<ODCID>`,
the name the `streams` table gives the connection's qlogs; a chunk's
end_offset on the QUIC stream, HTTP/3's frame headers included, logged as
it is handed to aioquic). aioquic serves
the streams that have data round robin, so the schedule is made by what the
server hands it and when:

- fifo: the whole image at t0; chunk k at its ready time t0 + k x chunk_ms,
  but not before every image byte has been sent once (aioquic's sender has
  none pending): whole messages in queue order;
- priority: each chunk at its ready time; the image in 4,096-byte pieces,
  the next one only while fewer than `--committed` (32,768) of its bytes are
  unacknowledged, as a TCP socket's send buffer holds them back: a chunk
  waits behind at most that much image.
"""

import argparse
import asyncio
import os
import sys
import time

PIECE = 4096
CHUNK_BYTES = 960


def _unacked(sender):
    return sender._buffer_stop - sender._buffer_start   # written, not yet acknowledged


def _all_sent_once(sender, size):
    return sender._buffer_stop >= size and len(sender._pending) == 0


class Sender:
    """The schedule of one connection's two answers (see the module's
    docstring): `h3` aioquic's H3Connection, `quic` its QuicConnection,
    `transmit` the protocol's, `a` the server's arguments."""

    def __init__(self, h3, quic, transmit, paths, a):
        from .streaming import EventLog
        self.h3, self.transmit, self.a = h3, transmit, a
        self.image, self.audio = paths["/image"], paths["/audio"]
        self.t0 = time.time_ns()
        self.log = EventLog(a.log, connection="qlog:" + quic.original_destination_connection_id.hex(),
                            direction="s2c")
        for sid, size in ((self.image, a.image_bytes), (self.audio, a.chunks * CHUNK_BYTES)):
            h3.send_headers(sid, [(b":status", b"200"), (b"content-length", str(size).encode())])
            self.log("stream_ready", ts_ns=self.t0, stream_id=str(sid), committed=a.committed)
        # held here: aioquic drops a stream from its table once it is finished
        self.senders = {sid: quic._streams[sid].sender for sid in (self.image, self.audio)}
        self.sent_image = self.sent_chunks = 0
        self.image_out = False   # FIFO: every image byte sent once

    def _image(self):
        a, sender = self.a, self.senders[self.image]
        if a.mode == "fifo" and self.sent_image == 0:
            self.sent_image = a.image_bytes
            self.h3.send_data(self.image, b"i" * a.image_bytes, end_stream=True)
        while a.mode == "priority" and self.sent_image < a.image_bytes \
                and _unacked(sender) < a.committed:
            n = min(PIECE, a.image_bytes - self.sent_image)
            self.sent_image += n
            self.h3.send_data(self.image, b"i" * n, end_stream=self.sent_image == a.image_bytes)
        self.image_out = self.image_out or _all_sent_once(sender, a.image_bytes)

    def tick(self):
        a = self.a
        self._image()
        now = time.time_ns()
        while self.sent_chunks < a.chunks and \
                now >= self.t0 + round(self.sent_chunks * a.chunk_ms * 1e6) and \
                (a.mode == "priority" or self.image_out):
            k = self.sent_chunks
            self.sent_chunks += 1
            self.h3.send_data(self.audio, b"a" * CHUNK_BYTES, end_stream=self.sent_chunks == a.chunks)
            # its end on the QUIC stream (HTTP/3's HEADERS and DATA frame headers included)
            self.log("stream_chunk", ts_ns=self.t0, stream_id=str(self.audio),
                     end_offset=self.senders[self.audio]._buffer_stop,
                     ready_ns=self.t0 + round(k * a.chunk_ms * 1e6),
                     play_ns=self.t0 + round((a.play_ms + k * a.chunk_ms) * 1e6),
                     duration_ns=round(a.chunk_ms * 1e6))
        self.transmit()
        if self.sent_chunks < a.chunks or self.sent_image < a.image_bytes:
            asyncio.get_running_loop().call_later(0.0005, self.tick)
        else:
            self.log.close()


async def _serve(a):
    from .h3 import serve_h3

    def setup(server):
        server.paths, server.sender = {}, None

    def on_request(server, stream_id, path):
        server.paths[path] = stream_id
        if {"/image", "/audio"} <= set(server.paths) and server.sender is None:
            server.sender = Sender(server.h3, server._quic, server.transmit, server.paths, a)
            server.sender.tick()

    await serve_h3(a.addr, a.port, a.qlog_dir, on_request, setup)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tracekit.lab.multiplex_quic")
    p.add_argument("--addr", required=True)
    p.add_argument("--port", type=int, default=4433)
    p.add_argument("--qlog-dir", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--mode", choices=["fifo", "priority"], default="fifo")
    p.add_argument("--image-bytes", type=int, default=60_000)
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--chunk-ms", type=float, default=20.0)
    p.add_argument("--play-ms", type=float, default=200.0)
    p.add_argument("--committed", type=int, default=32_768)
    a = p.parse_args(argv)
    os.makedirs(a.qlog_dir, exist_ok=True)
    try:
        asyncio.run(_serve(a))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
