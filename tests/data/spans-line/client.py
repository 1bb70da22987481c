#!/usr/bin/env python3
"""HTTP/1.1 client writing request_start/connect_*/first_byte/request_end (JSON lines).
usage: client.py HOST PORT MODE(fresh|persistent) N LOG RUN PREFIX GAP_S"""
import json, socket, sys, time
host, port, mode, n, logp, run, prefix, gap = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7], float(sys.argv[8])
logf = open(logp, "a")
def log(**kw):
    logf.write(json.dumps(kw) + "\n"); logf.flush()
sock = None; own = []
def connect(rid):
    global sock
    log(ts=time.time_ns(), kind="connect_start", run=run, request=rid)
    sock = socket.create_connection((host, port))
    lp = sock.getsockname()[1]
    log(ts=time.time_ns(), kind="connect_end", run=run, request=rid, local_port=lp)
    return lp
for i in range(n):
    rid = "%s-%d" % (prefix, i)
    t0 = time.time_ns(); p0 = time.perf_counter_ns()
    fresh = sock is None or mode == "fresh"
    if fresh:
        if sock is not None:
            sock.close()
        log(ts=t0, kind="request_start", run=run, request=rid, connection="fresh")
        lp = connect(rid)
    else:
        lp = sock.getsockname()[1]
        log(ts=t0, kind="request_start", run=run, request=rid, connection="reused", local_port=lp)
    req = ("GET /blob HTTP/1.1\r\nHost: %s\r\nX-Request-Id: %s\r\n\r\n" % (host, rid)).encode()
    sock.sendall(req)
    buf = b""; fb = None
    while b"\r\n\r\n" not in buf:
        d = sock.recv(65536)
        if fb is None:
            fb = time.time_ns(); log(ts=fb, kind="first_byte", run=run, request=rid, local_port=lp)
        buf += d
    head, body = buf.split(b"\r\n\r\n", 1)
    cl = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0]
    got = len(body)
    while got < cl:
        d = sock.recv(262144)
        if not d:
            raise SystemExit("short body")
        got += len(d)
    t1 = time.time_ns(); p1 = time.perf_counter_ns()
    log(ts=t1, kind="request_end", run=run, request=rid, local_port=lp, connection="fresh" if fresh else "reused",
        bytes_up=len(req), bytes_down=len(head) + 4 + cl)
    own.append(dict(request=rid, start_ns=t0, end_ns=t1, own_ms=(p1 - p0) / 1e6, local_port=lp, fresh=fresh))
    if mode == "fresh":
        sock.close(); sock = None
    if gap:
        time.sleep(gap)
if sock: sock.close()
print(json.dumps(own))
