"""HTTP/3 over QUIC (aioquic): a server that answers GET /bytes/N with N bytes
and a client that fetches on one connection, both writing qlog, the client
also an SSLKEYLOGFILE and tracekit events (request_start/request_end with its
UDP port as the flow hint).

    python -m tracekit.lab.h3 server --addr A --port P --qlog-dir DIR
    python -m tracekit.lab.h3 client --addr A --port P --qlog-dir DIR \\
        --events events.jsonl --keylog keys.log --requests 3 --bytes 354640

Needs aioquic (pip install 'tracekit[lab]'). The server's certificate is
self-signed and made at start; the client does not verify it.
"""

import argparse
import asyncio
import datetime
import json
import os
import signal
import ssl
import sys
import tempfile
import time


def private_file(path):
    """Create (or truncate) a file only its owner can read: keys and key logs
    (0600, in a folder made 0700)."""
    os.chmod(os.path.dirname(os.path.abspath(path)), 0o700)
    try:  # never through a symlink planted there (root would clobber its target)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        from ..core.errors import TracekitError
        raise TracekitError(f"{path}: cannot write it ({e.strerror}): a key file is never "
                            f"written through a symbolic link") from None
    os.fchmod(fd, 0o600)  # also when it existed with wider modes
    return os.fdopen(fd, "wb")


def _certificate(directory):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tracekit-lab")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .sign(key, hashes.SHA256()))
    cert_path, key_path = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with private_file(key_path) as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path


async def serve_h3(addr, port, qlog_dir, on_request, setup=None):
    """An HTTP/3 server (aioquic) writing qlogs to qlog_dir: each request's
    HEADERS calls on_request(server, stream_id, path), where server has .h3 and
    .transmit(); setup(server) runs once per connection. Prints "up", then
    serves until cancelled."""
    from aioquic.asyncio import QuicConnectionProtocol, serve
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import ProtocolNegotiated
    from aioquic.quic.logger import QuicFileLogger

    class Server(QuicConnectionProtocol):
        h3 = None

        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            if setup is not None:
                setup(self)

        def quic_event_received(self, event):
            if isinstance(event, ProtocolNegotiated):
                self.h3 = H3Connection(self._quic)
            if self.h3 is None:
                return
            for ev in self.h3.handle_event(event):
                if isinstance(ev, HeadersReceived):
                    on_request(self, ev.stream_id, dict(ev.headers).get(b":path", b"/").decode())

    config = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN,
                               quic_logger=QuicFileLogger(qlog_dir))
    with tempfile.TemporaryDirectory() as d:
        config.load_cert_chain(*_certificate(d))
    await serve(addr, port, configuration=config, create_protocol=Server)
    print("up", flush=True)
    await asyncio.Future()


async def _serve(addr, port, qlog_dir, processing_ms=0.0):
    def respond(server, stream_id, size):
        server.h3.send_headers(stream_id, [(b":status", b"200"),
                                           (b"content-length", str(size).encode())])
        server.h3.send_data(stream_id, b"x" * size, end_stream=True)
        server.transmit()

    def on_request(server, stream_id, path):
        size = int(path.rsplit("/", 1)[-1]) if path.startswith("/bytes/") else 0
        asyncio.get_running_loop().call_later(processing_ms / 1000, respond, server, stream_id, size)

    await serve_h3(addr, port, qlog_dir, on_request)


async def _fetch(addr, port, qlog_dir, events, keylog, requests, size, first=0, run=None):
    from aioquic.asyncio import QuicConnectionProtocol, connect
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import DataReceived, HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.logger import QuicFileLogger

    class Client(QuicConnectionProtocol):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.h3 = H3Connection(self._quic)
            self.waiting = {}

        def quic_event_received(self, event):
            for ev in self.h3.handle_event(event):
                if isinstance(ev, (HeadersReceived, DataReceived)) and ev.stream_id in self.waiting:
                    got, done = self.waiting[ev.stream_id]
                    if isinstance(ev, DataReceived):
                        got.append(len(ev.data))
                    if ev.stream_ended:
                        done.set_result(sum(got))

        async def get(self, path):
            stream_id = self._quic.get_next_available_stream_id()
            done = asyncio.get_running_loop().create_future()
            self.waiting[stream_id] = ([], done)
            self.h3.send_headers(stream_id, [(b":method", b"GET"), (b":scheme", b"https"),
                                             (b":authority", addr.encode()), (b":path", path.encode())],
                                 end_stream=True)
            self.transmit()
            return await done

    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE,
                               quic_logger=QuicFileLogger(qlog_dir))
    with open(keylog, "a") as keys, open(events, "a", buffering=1) as log:
        config.secrets_log_file = keys

        def event(kind, **fields):
            common = {"run": run} if run else {}
            log.write(json.dumps({"ts": time.time_ns(), "kind": kind, **common, **fields}) + "\n")
        # the first request starts before its connection: its setup is part of it
        event("request_start", request=f"h3-{first}")
        event("connect_start", request=f"h3-{first}")
        async with connect(addr, port, configuration=config, create_protocol=Client) as client:
            await client.wait_connected()
            local_port = client._transport.get_extra_info("sockname")[1]
            event("connect_end", request=f"h3-{first}", local_port=local_port, remote_port=port)
            for i in range(first, first + requests):
                if i != first:
                    event("request_start", request=f"h3-{i}", local_port=local_port, remote_port=port)
                got = await client.get(f"/bytes/{size}")
                event("request_end", request=f"h3-{i}", local_port=local_port, remote_port=port,
                      bytes_down=got)
                if got != size:
                    raise RuntimeError(f"got {got} bytes, expected {size}")


def record(path, workdir, requests=2, size=100_000, port=4433):
    """Server and client over an EmulatedPath with a client-side capture of
    whole packets; return {"capture", "client_qlog", "server_qlog", "events",
    "keylog"} (qlog paths are lists: one file per connection)."""
    import glob
    import subprocess

    from .record import running, tcpdump
    from .wan import SERVER_ADDR

    out = {"capture": os.path.join(workdir, "client.pcap"),
           "events": os.path.join(workdir, "client-events.jsonl"),
           "keylog": os.path.join(workdir, "keys.log")}
    private_file(out["keylog"]).close()  # the client appends to it
    qlogs = {side: os.path.join(workdir, f"{side}-qlog") for side in ("client", "server")}
    server_cmd = [sys.executable, "-m", "tracekit.lab.h3", "server", "--addr", SERVER_ADDR,
                  "--port", str(port), "--qlog-dir", qlogs["server"]]
    with running(path.server, server_cmd, "HTTP/3 server"):
        with tcpdump(path.client, out["capture"], snaplen=None):
            subprocess.run(path.client([
                sys.executable, "-m", "tracekit.lab.h3", "client", "--addr", SERVER_ADDR,
                "--port", str(port), "--qlog-dir", qlogs["client"], "--events", out["events"],
                "--keylog", out["keylog"], "--requests", str(requests), "--bytes", str(size)]),
                check=True, timeout=120)
            # the server writes its qlog when the connection has drained
            deadline = time.monotonic() + 5
            while not glob.glob(os.path.join(qlogs["server"], "*.qlog")) and time.monotonic() < deadline:
                time.sleep(0.05)
    for side, d in qlogs.items():
        out[f"{side}_qlog"] = sorted(glob.glob(os.path.join(d, "*.qlog")))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tracekit.lab.h3")
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--addr", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--qlog-dir", required=True)
    p.add_argument("--events")
    p.add_argument("--keylog")
    p.add_argument("--requests", type=int, default=1)
    p.add_argument("--bytes", type=int, default=354_640)
    p.add_argument("--processing-ms", type=float, default=0.0)
    p.add_argument("--first", type=int, default=0, help="client: index of the first request id")
    p.add_argument("--run")
    a = p.parse_args(argv)
    os.makedirs(a.qlog_dir, exist_ok=True)
    if a.role == "server":
        asyncio.run(_serve(a.addr, a.port, a.qlog_dir, a.processing_ms))
    else:
        asyncio.run(_fetch(a.addr, a.port, a.qlog_dir, a.events, a.keylog, a.requests, a.bytes,
                           a.first, a.run))


if __name__ == "__main__":
    # Ctrl-C is the lab's to handle: it stops this process (SIGTERM) and cleans up
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(main())
