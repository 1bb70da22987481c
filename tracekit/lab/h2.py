"""HTTP/2 over TLS 1.3 (ALPN h2) for the request/response workloads, with the
`h2` state machine over ordinary sockets: the same requests and events as
tracekit.lab.tts, carried as HTTP/2 streams (GET /bytes/N) on one connection.
Needs h2 (pip install 'tracekit[lab]').
"""

import json
import time

from .streaming import EventLog


def serve_connection(conn, log_path, port, peer):
    """Answer HTTP/2 requests on one accepted TLS socket until it closes."""
    import h2.config
    import h2.connection
    import h2.events

    h = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False))
    h.initiate_connection()
    conn.sendall(h.data_to_send())
    pending = {}  # stream id -> [bytes left, event log]
    while True:
        data = conn.recv(65536)
        if not data:
            return
        for ev in h.receive_data(data):
            if isinstance(ev, h2.events.RequestReceived):
                headers = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
                           for k, v in ev.headers}
                ask = json.loads(headers.get("x-tracekit-request", "{}"))
                log = EventLog(log_path, request=ask.get("request"), local_port=port,
                               remote_addr=peer[0], remote_port=peer[1],
                               **({"run": ask["run"]} if ask.get("run") else {}))
                log("model_start")
                time.sleep(ask.get("processing_ms", 0) / 1000)
                log("model_end")
                size = int(ask.get("bytes", 0))
                h.send_headers(ev.stream_id, [(":status", "200"), ("content-length", str(size))],
                               end_stream=size == 0)
                pending[ev.stream_id] = [size, log]
        for sid in list(pending):
            left, log = pending[sid]
            while left > 0:
                room = min(h.local_flow_control_window(sid), h.max_outbound_frame_size, left)
                if room <= 0:
                    break
                left -= room
                h.send_data(sid, b"a" * room, end_stream=left == 0)
            pending[sid][0] = left
            if left == 0:
                log("response_sent")
                log.close()
                del pending[sid]
        out = h.data_to_send()
        if out:
            conn.sendall(out)


class Client:
    """One HTTP/2 connection on a connected TLS socket; get() one response at a time."""

    WINDOW = 1 << 24

    def __init__(self, sock, authority):
        import h2.config
        import h2.connection
        import h2.settings

        self.sock = sock
        self.authority = authority
        self.h = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
        self.h.initiate_connection()
        self.h.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self.WINDOW})
        self.h.increment_flow_control_window(self.WINDOW)
        sock.sendall(self.h.data_to_send())

    def get(self, ask, on_first_byte):
        import h2.events

        sid = self.h.get_next_available_stream_id()
        self.h.send_headers(sid, [(":method", "GET"), (":scheme", "https"),
                                  (":authority", self.authority),
                                  (":path", f"/bytes/{ask['bytes']}"),
                                  ("x-tracekit-request", json.dumps(ask))], end_stream=True)
        self.sock.sendall(self.h.data_to_send())
        got, first = 0, True
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the HTTP/2 server closed the connection")
            for ev in self.h.receive_data(data):
                if isinstance(ev, h2.events.DataReceived) and ev.stream_id == sid:
                    if first and ev.data:
                        on_first_byte()
                        first = False
                    got += len(ev.data)
                    self.h.acknowledge_received_data(ev.flow_controlled_length, sid)
                elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                    self.sock.sendall(self.h.data_to_send())
                    return got
            out = self.h.data_to_send()
            if out:
                self.sock.sendall(out)
