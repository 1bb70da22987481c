"""A streaming speech-like workload: a server that generates and sends 20 ms
chunks of 24 kHz mono 16-bit PCM, and a client whose playback callback runs
on a periodic clock. Both log tracekit's event schema (README: Event kinds).

    python -m tracekit.lab.streaming server --addr A --port P --log server.jsonl
    python -m tracekit.lab.streaming client --addr A --port P --log client.jsonl \\
        --chunks 200 --initial-buffer-ms 60

Server: a "model" thread makes chunk i due at t0 + i * 20 ms (real-time pace;
after a pause it emits its backlog at once), a sender thread writes each
chunk as soon as it exists (TCP_NODELAY, one chunk per write: 8-byte header
seq/length, then the PCM). Client: a reader thread reads whole chunks and
puts their frames in the playback buffer; a player thread, once the buffer
holds the initial buffer, asks for 480 frames every 20 ms on an absolute
clock and takes what is there (a shortfall is silence, an underrun).

Stalls to induce, each at a chunk number: `--pause-at N --pause-ms M` (the
client asks the server's model to stop; a test hook in the request),
`--throttle-at N --throttle-ms M` (the client's reader stops reading; the
kernel keeps receiving). A transport stall comes from the emulated path:
drop the chunk's segment (chunk k starts at relative sequence 1 + 968 k).
"""

import argparse
import json
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from .wan import SERVER_ADDR

SAMPLE_RATE = 24_000
CHUNK_MS = 20
FRAMES_PER_CHUNK = SAMPLE_RATE * CHUNK_MS // 1000  # 480
CHUNK_BYTES = FRAMES_PER_CHUNK * 2  # 16-bit mono: 960
HEADER = struct.Struct(">II")  # seq, payload length


class EventLog:
    """tracekit JSON Lines, thread-safe, flushed per line."""

    def __init__(self, path, **common):
        self.f = open(path, "a", buffering=1)
        self.common = common
        self.lock = threading.Lock()

    def __call__(self, kind, ts_ns=None, **fields):
        record = {"ts": ts_ns or time.time_ns(), "kind": kind, **self.common, **fields}
        with self.lock:
            self.f.write(json.dumps(record) + "\n")

    def close(self):
        self.f.close()


def _sleep_until(deadline):
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.005) if left > 0.002 else 0)


def serve(addr, port, log_path, pause_at=None, pause_ms=0.0, connections=1):
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((addr, port))
    lsock.listen()
    print("up", flush=True)
    for _ in range(connections):
        conn, peer = lsock.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        line = b""
        while not line.endswith(b"\n"):
            part = conn.recv(256)
            if not part:
                break
            line += part
        request = json.loads(line)
        log = EventLog(log_path, request=request["request"], stream=request["request"],
                       local_port=port, remote_addr=peer[0], remote_port=peer[1],
                       **({"run": request["run"]} if request.get("run") else {}))
        # a client may ask for a model pause (an induced stall) in its request
        _stream(conn, log, request["chunks"], request.get("pause_at", pause_at),
                request.get("pause_ms", pause_ms))
        conn.close()
        log.close()
    lsock.close()


def _stream(conn, log, chunks, pause_at, pause_ms):
    made = queue.Queue()

    def model():
        log("model_start")
        t0 = time.monotonic()
        for seq in range(chunks):
            if seq == pause_at:
                time.sleep(pause_ms / 1000)
            _sleep_until(t0 + seq * CHUNK_MS / 1000)
            pcm = bytes([seq % 256]) * CHUNK_BYTES
            log("chunk_generated", seq=seq, bytes=CHUNK_BYTES, frames=FRAMES_PER_CHUNK,
                sample_rate=SAMPLE_RATE)
            made.put((seq, pcm))
        log("model_end")
        made.put(None)

    threading.Thread(target=model, daemon=True).start()
    offset = 0
    while (item := made.get()) is not None:
        seq, pcm = item
        data = HEADER.pack(seq, len(pcm)) + pcm
        conn.sendall(data)
        log("chunk_sent", seq=seq, bytes=len(data), stream_offset=offset)
        offset += len(data)


def _read_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ConnectionError("the server closed the stream early")
        buf += part
    return bytes(buf)


def client(addr, port, log_path, request, chunks, initial_buffer_ms=60.0,
           throttle_at=None, throttle_ms=0.0, pause_at=None, pause_ms=0.0, run=None):
    log = EventLog(log_path, request=request, stream=request, **({"run": run} if run else {}))
    log("request_start", chunks=chunks)
    log("connect_start")
    sock = socket.create_connection((addr, port))
    local_port = sock.getsockname()[1]
    log("connect_end", local_port=local_port, remote_addr=addr, remote_port=port)
    ask = {"request": request, "chunks": chunks, "run": run}
    if pause_at is not None:
        ask.update(pause_at=pause_at, pause_ms=pause_ms)
    sock.sendall(json.dumps(ask).encode() + b"\n")
    buffered = bytearray()  # unplayed PCM
    lock = threading.Lock()
    have_initial = threading.Event()
    done_reading = threading.Event()
    initial_bytes = int(initial_buffer_ms * SAMPLE_RATE / 1000) * 2

    def reader():
        for seq in range(chunks):
            if seq == throttle_at:
                time.sleep(throttle_ms / 1000)
            head = _read_exact(sock, HEADER.size)
            got_seq, length = HEADER.unpack(head)
            pcm = _read_exact(sock, length)
            if seq == 0:
                log("first_byte", local_port=local_port)
            with lock:
                buffered.extend(pcm)
                level = len(buffered)
            log("chunk_arrived", seq=got_seq, bytes=HEADER.size + length,
                frames=length // 2, sample_rate=SAMPLE_RATE, local_port=local_port)
            if level >= initial_bytes:
                have_initial.set()
        have_initial.set()
        done_reading.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    have_initial.wait()
    log("playback_start", initial_buffer_ms=initial_buffer_ms, sample_rate=SAMPLE_RATE,
        frames_per_callback=FRAMES_PER_CHUNK)
    start = time.monotonic()
    n = 0
    while True:
        n += 1
        _sleep_until(start + n * CHUNK_MS / 1000)
        with lock:
            take = min(len(buffered), CHUNK_BYTES)
            del buffered[:take]
            left = len(buffered)
        log("playback_callback", requested_frames=FRAMES_PER_CHUNK, delivered_frames=take // 2,
            sample_rate=SAMPLE_RATE)
        if done_reading.is_set() and left == 0:
            break
    thread.join()
    sock.close()
    log("request_end", bytes_down=chunks * (HEADER.size + CHUNK_BYTES),
        local_port=local_port, remote_addr=addr, remote_port=port)
    log.close()


def record(path, workdir, streams, initial_buffer_ms=60.0, port=9100, run=None):
    """Run the server and one client per stream (one after the other, each on
    a new connection) over an EmulatedPath with a client-side capture;
    return {"capture", "client_log", "server_log"} paths.

    `streams` is a list of dicts: request (id), chunks, and optional stalls
    pause = (chunk, ms) for the server's model, throttle = (chunk, ms) for
    the client's reader. Transport stalls come from the path's drop rules.
    """
    from .record import running, tcpdump

    out = {"capture": os.path.join(workdir, "client.pcap"),
           "client_log": os.path.join(workdir, "client-events.jsonl"),
           "server_log": os.path.join(workdir, "server-events.jsonl")}
    server_cmd = [sys.executable, "-m", "tracekit.lab.streaming", "server", "--addr",
                  SERVER_ADDR, "--port", str(port), "--log", out["server_log"],
                  "--connections", str(len(streams))]
    with running(path.server, server_cmd, "streaming server") as server:
        with tcpdump(path.client, out["capture"]):
            for s in streams:
                cmd = [sys.executable, "-m", "tracekit.lab.streaming", "client", "--addr",
                       SERVER_ADDR, "--port", str(port), "--log", out["client_log"],
                       "--chunks", str(s.get("chunks", 100)), "--request", s["request"],
                       "--initial-buffer-ms", str(initial_buffer_ms)]
                if run:
                    cmd += ["--run", run]
                if s.get("pause"):
                    cmd += ["--pause-at", str(s["pause"][0]), "--pause-ms", str(s["pause"][1])]
                if s.get("throttle"):
                    cmd += ["--throttle-at", str(s["throttle"][0]),
                            "--throttle-ms", str(s["throttle"][1])]
                subprocess.run(path.client(cmd), check=True, timeout=120)
        server.wait(timeout=30)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tracekit.lab.streaming")
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--addr", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--connections", type=int, default=1)
    p.add_argument("--request", default="tts-1")
    p.add_argument("--chunks", type=int, default=200)
    p.add_argument("--initial-buffer-ms", type=float, default=60.0)
    p.add_argument("--pause-at", type=int)
    p.add_argument("--pause-ms", type=float, default=0.0)
    p.add_argument("--throttle-at", type=int)
    p.add_argument("--throttle-ms", type=float, default=0.0)
    p.add_argument("--run")
    a = p.parse_args(argv)
    if a.role == "server":
        serve(a.addr, a.port, a.log, a.pause_at, a.pause_ms, a.connections)
    else:
        client(a.addr, a.port, a.log, a.request, a.chunks, a.initial_buffer_ms,
               a.throttle_at, a.throttle_ms, a.pause_at, a.pause_ms, a.run)


if __name__ == "__main__":
    # Ctrl-C is the lab's to handle: it stops this process (SIGTERM) and cleans up
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(main())
