#!/usr/bin/env python3
"""HTTP/1.1 server: sleeps T_c then answers S bytes; logs model_start/model_end (JSON lines).
usage: server.py PORT TC_MS SIZE LOG RUN"""
import json, socket, sys, threading, time
port, tc, size, logp, run = int(sys.argv[1]), float(sys.argv[2]) / 1000, int(sys.argv[3]), sys.argv[4], sys.argv[5]
body = bytes((i * 7) & 255 for i in range(size))
lk = threading.Lock()
logf = open(logp, "a")
def log(**kw):
    with lk:
        logf.write(json.dumps(kw) + "\n"); logf.flush()
def handle(c, addr):
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
            head, buf = buf.split(b"\r\n\r\n", 1)
            rid = None
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"x-request-id":
                    rid = v.strip().decode()
            log(ts=time.time_ns(), kind="model_start", run=run, request=rid, remote_port=addr[1])
            time.sleep(tc)
            log(ts=time.time_ns(), kind="model_end", run=run, request=rid, remote_port=addr[1])
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n" % size + body)
    finally:
        c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port)); s.listen(16)
print("serving", flush=True)
while True:
    c, a = s.accept()
    threading.Thread(target=handle, args=(c, a), daemon=True).start()
