"""Two streams on one HTTP/2 connection (issue #27): a large image and an audio
stream of timed chunks, sent FIFO or with the audio first, over cleartext
HTTP/2 (h2c, prior knowledge) on TCP. Needs h2 (pip install 'tracekit[lab]').

    python -m tracekit.lab.multiplex server --addr A --port P --log server.jsonl --mode fifo
    python -m tracekit.lab.multiplex client --addr A --port P --log client.jsonl

The client asks for /image (stream 1) and /audio (stream 3) at once. The
server answers both when both requests are in (t0): the image's bytes are
ready at t0, audio chunk k at t0 + k x chunk_ms. `fifo` writes the whole
image, then the chunks; `priority` writes a chunk as soon as it is ready,
between the image's frames. The socket's send buffer is kept small so the
order the server writes is close to the order the bytes leave (a chunk
written while the buffer holds image bytes waits behind them).

Both log tracekit's stream events (docs/guide.md): the server stream_ready
(each stream at t0) and stream_chunk (each chunk: end_offset, ready_ns, play_ns =
t0 + play_ms + k x chunk_ms, duration_ns); the client stream_read when the
h2 library hands it a stream's end (the whole stream read: the ground truth
of `streams.deliverable_ns`). The capture's frames come from
`tracekit h2-events` (tracekit/pipeline/h2events.py).
"""

import argparse
import socket
import time

from .streaming import EventLog
from .wan import SERVER_ADDR

CHUNK_BYTES = 960   # 20 ms of 24 kHz mono 16-bit PCM
WINDOW = 1 << 24


def _h2(client_side):
    import h2.config
    import h2.connection
    return h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=client_side))


def _requests(conn, h):
    """Read until both requests are in: {path: stream id}."""
    import h2.events
    paths = {}
    while len(paths) < 2:
        data = conn.recv(65536)
        if not data:
            raise ConnectionError("the client left before asking for both streams")
        for ev in h.receive_data(data):
            if isinstance(ev, h2.events.RequestReceived):
                headers = {k.decode() if isinstance(k, bytes) else k: v for k, v in ev.headers}
                path = headers[":path"]
                paths[path.decode() if isinstance(path, bytes) else path] = ev.stream_id
        conn.sendall(h.data_to_send())
    return paths


def _outq(sock):
    """Bytes in the TCP socket's send queue, unacknowledged or unsent (SIOCOUTQ)."""
    import fcntl
    import struct
    import termios
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]


def _tls_server(conn):
    """The accepted socket in TLS 1.3 with ALPN h2 (a self-signed certificate made now)."""
    import ssl
    import tempfile

    from .h3 import _certificate
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_alpn_protocols(["h2"])
    with tempfile.TemporaryDirectory() as d:
        ctx.load_cert_chain(*_certificate(d))
    return ctx.wrap_socket(conn, server_side=True)


def serve(addr, port, log_path, mode, image_bytes, chunks, chunk_ms, play_ms, connection,
          tls=False, sndbuf=16384, piece=0, committed=0):
    """Answer one connection (see the module's docstring). `sndbuf`: the
    SO_SNDBUF asked for (the kernel doubles it); `piece`: the image's DATA
    frames' size (0: the largest frame the peer allows); `committed`: an
    image frame is written only while the socket holds fewer bytes than
    that unacknowledged or unsent (SIOCOUTQ; 0: no such wait), so that a
    chunk waits behind at most that much of the image plus a frame (the
    kernel lets more than SO_SNDBUF out at a small buffer)."""
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((addr, port))
    lsock.listen()
    print("up", flush=True)
    conn, _ = lsock.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sndbuf = conn.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)  # as the kernel set it
    if tls:
        conn = _tls_server(conn)
    h = _h2(False)
    h.initiate_connection()
    conn.sendall(h.data_to_send())
    paths = _requests(conn, h)
    image, audio = paths["/image"], paths["/audio"]
    t0 = time.time_ns()
    log = EventLog(log_path, connection=connection, direction="s2c")
    for sid, size in ((image, image_bytes), (audio, chunks * CHUNK_BYTES)):
        h.send_headers(sid, [(":status", "200"), ("content-length", str(size))])
        log("stream_ready", ts_ns=t0, stream_id=str(sid), sndbuf=sndbuf)
    for k in range(chunks):
        log("stream_chunk", ts_ns=t0, stream_id=str(audio), end_offset=(k + 1) * CHUNK_BYTES,
            ready_ns=t0 + round(k * chunk_ms * 1e6),
            play_ns=t0 + round((play_ms + k * chunk_ms) * 1e6), duration_ns=round(chunk_ms * 1e6))
    conn.sendall(h.data_to_send())
    frame = min(piece, h.max_outbound_frame_size) if piece else h.max_outbound_frame_size
    sent_image, sent_chunks = 0, 0
    while sent_image < image_bytes or sent_chunks < chunks:
        due = t0 + round(sent_chunks * chunk_ms * 1e6)
        chunk_ready = sent_chunks < chunks and time.time_ns() >= due
        if chunk_ready and (mode == "priority" or sent_image >= image_bytes):
            sent_chunks += 1
            h.send_data(audio, b"a" * CHUNK_BYTES, end_stream=sent_chunks == chunks)
        elif sent_image < image_bytes and committed and _outq(conn) >= committed:
            time.sleep(0.0005)   # the socket holds enough; a chunk may become ready meanwhile
            continue
        elif sent_image < image_bytes:
            n = min(frame, image_bytes - sent_image)
            sent_image += n
            h.send_data(image, b"i" * n, end_stream=sent_image == image_bytes)
        else:
            time.sleep(max(0.0, (due - time.time_ns()) / 1e9))
            continue
        conn.sendall(h.data_to_send())
    log.close()
    conn.settimeout(10)
    try:
        while conn.recv(65536):  # until the client closes
            pass
    except OSError:
        pass
    conn.close()
    lsock.close()


def client(addr, port, log_path, connection, keylog=None):
    """Ask for both streams; log stream_read as each one ends. With `keylog`:
    TLS 1.3 (ALPN h2, the server not verified), its secrets written there."""
    import h2.events
    import h2.settings
    sock = socket.create_connection((addr, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if keylog:
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.set_alpn_protocols(["h2"])
        ctx.keylog_filename = keylog
        sock = ctx.wrap_socket(sock)
    h = _h2(True)
    h.initiate_connection()
    h.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WINDOW})
    h.increment_flow_control_window(WINDOW)
    for path in ("/image", "/audio"):
        h.send_headers(h.get_next_available_stream_id(),
                       [(":method", "GET"), (":scheme", "http"), (":authority", addr),
                        (":path", path)], end_stream=True)
    sock.sendall(h.data_to_send())
    log = EventLog(log_path, connection=connection, direction="s2c")
    ended = 0
    while ended < 2:
        data = sock.recv(65536)
        now = time.time_ns()   # the bytes were handed to the application now
        if not data:
            raise ConnectionError("the server closed the connection")
        for ev in h.receive_data(data):
            if isinstance(ev, h2.events.DataReceived):
                h.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                log("stream_read", ts_ns=now, stream_id=str(ev.stream_id))
                ended += 1
        out = h.data_to_send()
        if out:
            sock.sendall(out)
    log.close()
    sock.close()


def record(workdir, mode, hole=None, rate_mbps=20.0, delay_ms=10.0, port=9300, tls=False,
           **server_args):
    """One run over an EmulatedPath (root): the server's and the client's
    captures (whole packets), both logs, the forwarder's drop log. `hole`:
    the relative sequence number (data from 1) of a server byte whose
    segment the path drops once. Returns the paths."""
    import os
    import subprocess
    import sys

    from .record import running, tcpdump
    from .wan import Direction, EmulatedPath, PathSpec
    os.makedirs(workdir, exist_ok=True)
    spec = PathSpec(up=Direction(delay_ms), down=Direction(
        delay_ms, rate_mbps=rate_mbps, drop_segments=((hole, 1),) if hole else ()))
    out = {name: os.path.join(workdir, name) for name in
           ("server.pcap", "client.pcap", "server.jsonl", "client.jsonl")}
    connection = os.path.basename(os.path.abspath(workdir))
    me = [sys.executable, "-m", "tracekit.lab.multiplex"]
    common = ["--addr", SERVER_ADDR, "--port", str(port), "--connection", connection]
    extra = [w for k, v in server_args.items() for w in (f"--{k.replace('_', '-')}", str(v))]
    tls_server, tls_client = [], []
    if tls:
        out["keys.log"] = os.path.join(workdir, "keys.log")
        tls_server, tls_client = ["--tls"], ["--keylog", out["keys.log"]]
    with EmulatedPath(spec, workdir) as path:
        with running(path.server, me + ["server", "--log", out["server.jsonl"], "--mode", mode,
                                        *common, *extra, *tls_server], "multiplex server") as server:
            with tcpdump(path.server, out["server.pcap"], snaplen=0), \
                    tcpdump(path.client, out["client.pcap"], snaplen=0):
                subprocess.run(path.client(me + ["client", "--log", out["client.jsonl"], *common,
                                                 *tls_client]),
                               check=True, timeout=60)
            server.wait(timeout=30)
    out["drops.jsonl"] = path.drop_log
    out["connection"] = connection
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tracekit.lab.multiplex")
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--addr", default=SERVER_ADDR)
    p.add_argument("--port", type=int, default=9300)
    p.add_argument("--log", required=True)
    p.add_argument("--connection", default="lab")
    p.add_argument("--mode", choices=["fifo", "priority"], default="fifo")
    p.add_argument("--image-bytes", type=int, default=400_000)
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--chunk-ms", type=float, default=20.0)
    p.add_argument("--play-ms", type=float, default=150.0)
    p.add_argument("--sndbuf", type=int, default=16384, help="server: SO_SNDBUF asked for")
    p.add_argument("--piece", type=int, default=0, help="server: image DATA frame size")
    p.add_argument("--committed", type=int, default=0,
                   help="server: write an image frame only while SIOCOUTQ is below this")
    p.add_argument("--tls", action="store_true", help="server: TLS 1.3 with ALPN h2")
    p.add_argument("--keylog", help="client: TLS 1.3, its secrets written here")
    a = p.parse_args(argv)
    if a.role == "server":
        serve(a.addr, a.port, a.log, a.mode, a.image_bytes, a.chunks, a.chunk_ms, a.play_ms,
              a.connection, a.tls, a.sndbuf, a.piece, a.committed)
    else:
        client(a.addr, a.port, a.log, a.connection, a.keylog)


if __name__ == "__main__":
    main()
