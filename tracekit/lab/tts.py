"""Request/response workloads over fresh connections (one per request) or one
persistent connection, in three shapes (WORKLOADS): `tts`, a short request
up, ~30 ms of processing, a fixed 354,640-byte response down; `asr`, ~355 KB
of audio up and a short reply; `agent`, rounds of a 0.8 MB screenshot up and
a small action down, each round after the previous one. Both sides log
tracekit's event schema; the server also records the kernel's TCP_INFO
after each response (a `tcp_info` event), and the client after each upload.

    python -m tracekit.lab.tts server --addr A --port P --log server.jsonl
    python -m tracekit.lab.tts client --addr A --port P --log client.jsonl \\
        --requests 5 --connection fresh|persistent [--run ID]

Wire format: the client sends one JSON line {"request", "bytes",
"processing_ms"}; the server answers with an 8-byte length and the body.
"""

import argparse
import json
import os
import signal
import socket
import ssl
import struct
import sys
import threading
import time

from .streaming import EventLog, _read_exact

RESPONSE_BYTES = 354_640
PROCESSING_MS = 30.0
# shape -> (bytes up after the request line, bytes down)
WORKLOADS = {"tts": (0, 354_640), "asr": (354_640, 200), "agent": (800_000, 2_000)}
LENGTH = struct.Struct(">Q")
# struct tcp_info (linux/tcp.h): fields worth keeping, by offset and type
TCP_INFO = {"tcpi_rto_us": (8, "I"), "tcpi_snd_mss": (16, "I"), "tcpi_rtt_us": (68, "I"),
            "tcpi_rttvar_us": (72, "I"), "tcpi_snd_ssthresh": (76, "I"), "tcpi_snd_cwnd": (80, "I"),
            "tcpi_total_retrans": (100, "I"), "tcpi_min_rtt_us": (148, "I"),
            "tcpi_delivery_rate": (160, "Q"), "tcpi_busy_time_us": (168, "Q"),
            "tcpi_rwnd_limited_us": (176, "Q"), "tcpi_sndbuf_limited_us": (184, "Q"),
            "tcpi_bytes_retrans": (208, "Q")}


def tcp_info(sock):
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    return {k: struct.unpack_from(t, raw, o)[0] for k, (o, t) in TCP_INFO.items() if o + 8 <= len(raw)}


def _handle(conn, peer, log_path, port, tls=None):
    buf = b""
    if tls is not None:
        try:
            conn = tls.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            conn.close()
            return
        if conn.selected_alpn_protocol() == "h2":
            from .h2 import serve_connection
            with conn:
                serve_connection(conn, log_path, port, peer)
            return
    with conn:
        while True:
            while b"\n" not in buf:
                part = conn.recv(4096)
                if not part:
                    return
                buf += part
            line, buf = buf.split(b"\n", 1)
            ask = json.loads(line)
            log = EventLog(log_path, request=ask["request"], local_port=port,
                           remote_addr=peer[0], remote_port=peer[1],
                           **({"run": ask["run"]} if ask.get("run") else {}))
            upload = ask.get("upload", 0)
            while len(buf) < upload:
                part = conn.recv(65536)
                if not part:
                    return
                buf += part
            buf = buf[upload:]
            if upload:
                log("upload_received", bytes=upload)
            log("model_start")
            time.sleep(ask.get("processing_ms", PROCESSING_MS) / 1000)
            log("model_end")
            conn.sendall(LENGTH.pack(ask["bytes"]) + b"a" * ask["bytes"])
            log("response_sent", bytes=ask["bytes"])
            # the kernel's account once everything is acknowledged
            for _ in range(500):
                raw = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
                if struct.unpack_from("I", raw, 24)[0] == 0:  # tcpi_unacked
                    break
                time.sleep(0.01)
            ca = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
            log("tcp_info", **tcp_info(conn), congestion=ca.split(b"\0")[0].decode())
            log.close()


def serve(addr, port, log_path, cert=None, key=None, congestion=None):
    tls = None
    if cert:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.minimum_version = ssl.TLSVersion.TLSv1_3
        tls.set_alpn_protocols(["h2", "http/1.1"])
        tls.load_cert_chain(cert, key)
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if congestion:  # accepted connections inherit it; root may use any available algorithm
        lsock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion.encode())
    lsock.bind((addr, port))
    lsock.listen(64)
    print("up", flush=True)
    while True:
        conn, peer = lsock.accept()
        threading.Thread(target=_handle, args=(conn, peer, log_path, port, tls), daemon=True).start()


def socks5_connect(sock, addr, port):
    """SOCKS5 (RFC 1928) CONNECT without authentication, IPv4 target."""
    sock.sendall(b"\x05\x01\x00")
    if _read_exact(sock, 2) != b"\x05\x00":
        raise ConnectionError("the SOCKS5 proxy refused the no-authentication method")
    sock.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(addr) + struct.pack(">H", port))
    reply = _read_exact(sock, 10)
    if reply[1] != 0:
        raise ConnectionError(f"the SOCKS5 proxy could not connect (reply {reply[1]})")


def client(addr, port, log_path, requests, connection, run=None, response_bytes=RESPONSE_BYTES,
           processing_ms=PROCESSING_MS, prefix="r", warmup=0, upload_bytes=0, tls=False,
           keylog=None, socks=None, http2=False):
    """`warmup` requests first, on the same connection and not logged (a
    persistent connection measured warm: its window already open). With
    `tls`, TLS 1.3 (ALPN http/1.1) over each connection, the secrets in
    `keylog` (SSLKEYLOGFILE format) when given."""
    common = {"run": run} if run else {}
    context = None
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the lab's self-signed server
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.set_alpn_protocols(["h2"] if http2 else ["http/1.1"])
        if keylog:
            context.keylog_filename = keylog
    sock = None
    for i in range(-warmup, requests):
        req = f"{prefix}{i}" if i >= 0 else f"warmup{-i}"
        log = EventLog(log_path if i >= 0 else os.devnull, request=req, **common)
        log("request_start", connection="fresh" if sock is None else "reused")
        if sock is None:
            log("connect_start")
            if socks:  # through a local SOCKS5 proxy, as Queqiao presents itself
                shost, sport = socks.rsplit(":", 1)
                sock = socket.create_connection((shost, int(sport)))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                log("connect_end", local_port=sock.getsockname()[1], remote_addr=shost,
                    remote_port=int(sport))
                log("proxy_start", local_port=sock.getsockname()[1])
                socks5_connect(sock, addr, port)
                log("proxy_done", local_port=sock.getsockname()[1])
            else:
                sock = socket.create_connection((addr, port))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                log("connect_end", local_port=sock.getsockname()[1], remote_addr=addr,
                    remote_port=port)
            if context is not None:
                sock = context.wrap_socket(sock)
                log("tls_done", local_port=sock.getsockname()[1], version=sock.version(),
                    alpn=sock.selected_alpn_protocol())
                if http2:
                    from .h2 import Client
                    session = Client(sock, addr)
        local_port = sock.getsockname()[1]
        if http2:  # one HTTP/2 stream per request
            n = session.get({"request": req, "bytes": response_bytes, "run": run,
                             "processing_ms": processing_ms},
                            lambda: log("first_byte", local_port=local_port))
            log("request_end", local_port=local_port, remote_addr=addr, remote_port=port,
                bytes_down=n)
            log.close()
            if connection == "fresh":
                sock.close()
                sock = None
            continue
        sock.sendall(json.dumps({"request": req, "bytes": response_bytes, "run": run,
                                 "processing_ms": processing_ms,
                                 "upload": upload_bytes}).encode() + b"\n" + b"u" * upload_bytes)
        if upload_bytes:
            log("upload_sent", bytes=upload_bytes, local_port=local_port)
        head = _read_exact(sock, 1)
        log("first_byte", local_port=local_port)
        head += _read_exact(sock, LENGTH.size - 1)
        (n,) = LENGTH.unpack(head)
        _read_exact(sock, n)
        log("request_end", local_port=local_port, remote_addr=addr, remote_port=port,
            bytes_down=n, **({"bytes_up": upload_bytes} if upload_bytes else {}))
        log.close()
        if connection == "fresh":
            sock.close()
            sock = None
    if sock is not None:
        sock.close()


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tracekit.lab.tts")
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--addr", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--requests", type=int, default=5)
    p.add_argument("--connection", choices=["fresh", "persistent"], default="fresh")
    p.add_argument("--run")
    p.add_argument("--bytes", type=int, default=RESPONSE_BYTES)
    p.add_argument("--processing-ms", type=float, default=PROCESSING_MS)
    p.add_argument("--prefix", default="r")
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--upload-bytes", type=int, default=0)
    p.add_argument("--tls-cert", help="server: serve TLS 1.3 with this certificate")
    p.add_argument("--tls-key")
    p.add_argument("--congestion", help="server: this congestion control on its sockets")
    p.add_argument("--tls", action="store_true", help="client: TLS 1.3")
    p.add_argument("--keylog", help="client: write TLS secrets here (SSLKEYLOGFILE format)")
    p.add_argument("--socks", metavar="HOST:PORT", help="client: connect through this SOCKS5 proxy")
    p.add_argument("--h2", action="store_true", help="client: HTTP/2 over TLS (implies --tls)")
    a = p.parse_args(argv)
    if a.role == "server":
        serve(a.addr, a.port, a.log, a.tls_cert, a.tls_key, a.congestion)
    else:
        client(a.addr, a.port, a.log, a.requests, a.connection, a.run, a.bytes,
               a.processing_ms, a.prefix, a.warmup, a.upload_bytes, a.tls or a.h2, a.keylog,
               a.socks, a.h2)


if __name__ == "__main__":
    # Ctrl-C is the lab's to handle: it stops this process (SIGTERM) and cleans up
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(main())
