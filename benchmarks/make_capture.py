"""Make benchmark captures of real kernel TCP through a 200 Mbit/s bottleneck.

Two workloads, both real kernel TCP between three network namespaces
(client - router - server, veth pairs, segmentation offloads off so every
packet on the wire is at most one MTU; the router shapes each direction to
200 Mbit/s with tbf) recorded by tcpdump on the router's client-side
interface:

- `mix` (the default, about 2.3 M packets in 70-80 s): 2,000 short HTTP/1.0
  GETs on fresh connections, 6 downloads of 150 MB and 2 uploads of 100 MB
  (CUBIC and BBR chosen per socket, alternately), and 6 RPC streams of
  80,000 request/response rounds each on long-lived connections (request
  200 bytes, response 200-4,000 bytes). Bulk flows, short flows and flows
  with tens of thousands of exchanges in one capture: what real traffic has
  and what no single workload flatters.
- `short`: only short connections (`--short N` of them, 100 bytes up,
  1,000 down): where per-connection costs dominate.

    python benchmarks/make_capture.py --out benchmarks/data            # mix, 128 B and full
    python benchmarks/make_capture.py --workload short --short 100000

Writes `<name>-128.pcap` (128-byte snaplen) and `<name>-full.pcap` (whole
packets), prints tcpdump's packet and drop counts, and refuses to leave a
capture that tcpdump says is incomplete. Needs root, iproute2, ethtool,
tcpdump. Removes the namespaces and every process it started, also after
an error or Ctrl-C.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

TAG = f"tkb{os.getpid()}"
CLIENT, ROUTER, SERVER = f"{TAG}c", f"{TAG}r", f"{TAG}s"
CLIENT_ADDR, SERVER_ADDR = "198.18.0.1", "198.19.0.1"
RATE = "200mbit"

SERVER_CODE = r"""
import os, random, socket, sys, threading
TCP_CONGESTION = 13
def serve(port, handler):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(4096)
    while True:
        c, _ = s.accept()
        threading.Thread(target=handler, args=(c,), daemon=True).start()
def recv_line(c):
    data = b""
    while not data.endswith(b"\n"):
        d = c.recv(1)
        if not d:
            return None
        data += d
    return data.decode().split()
def get(c):  # HTTP/1.0: one response, then close
    with c:
        data = b""
        while b"\r\n\r\n" not in data:
            d = c.recv(4096)
            if not d:
                return
            data += d
        body = b"g" * (2000 + hash(data) % 30000)
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
def download(c):  # "<bytes> <cc>\n" -> that many bytes sent with that congestion control
    with c:
        n, cc = recv_line(c)
        c.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, cc.encode())
        n = int(n)
        chunk = b"d" * (1 << 20)
        while n > 0:
            c.sendall(chunk[:min(n, len(chunk))])
            n -= len(chunk)
def upload(c):  # reads until EOF, answers with the byte count
    with c:
        got = 0
        while True:
            d = c.recv(1 << 20)
            if not d:
                break
            got += len(d)
        c.sendall(b"%d\n" % got)
def rpc(c):  # a request of 200 bytes -> a response of the size it names
    with c:
        buf = b""
        while True:
            while len(buf) < 200:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
            req, buf = buf[:200], buf[200:]
            size = int(req[:8])
            c.sendall(b"r" * size)
for port, handler in ((8001, get), (8002, download), (8003, upload)):
    threading.Thread(target=serve, args=(port, handler), daemon=True).start()
if os.fork() == 0:  # the RPC server in its own process (its own GIL)
    serve(8004, rpc)
print("ready", flush=True)
sys.stdin.read()
"""

CLIENT_CODE = r"""
import random, socket, sys
TCP_CONGESTION = 13
SERVER = sys.argv[2]
kind = sys.argv[1]
def connect(port):
    return socket.create_connection((SERVER, port))
if kind == "download":
    n, cc = sys.argv[3], sys.argv[4]
    s = connect(8002)
    s.sendall(f"{n} {cc}\n".encode())
    while s.recv(1 << 20):
        pass
elif kind == "upload":
    n, cc = int(sys.argv[3]), sys.argv[4]
    s = socket.socket()
    s.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, cc.encode())
    s.connect((SERVER, 8003))
    chunk = b"u" * (1 << 20)
    while n > 0:
        s.sendall(chunk[:min(n, len(chunk))])
        n -= len(chunk)
    s.shutdown(socket.SHUT_WR)
    s.recv(64)
elif kind == "rpc":
    rounds, seed = int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    s = connect(8004)
    for _ in range(rounds):
        size = rng.randrange(200, 4000)
        s.sendall(b"%08d" % size + b"q" * 192)
        got = 0
        while got < size:
            got += len(s.recv(65536))
    s.close()
elif kind == "get":
    for i in range(int(sys.argv[3])):
        s = connect(8001)
        s.sendall(b"GET /%d HTTP/1.0\r\nHost: bench\r\n\r\n" % i)
        while s.recv(65536):
            pass
        s.close()
elif kind == "short":
    for i in range(int(sys.argv[3])):
        s = connect(8005)
        s.sendall(b"q" * 100)
        got = 0
        while got < 1000:
            got += len(s.recv(4096))
        s.close()
"""

SHORT_SERVER_CODE = r"""
import socket, sys, threading
RESP = b"r" * 1000
def short(conn):
    with conn:
        while True:
            d = conn.recv(4096)
            if not d:
                return
            conn.sendall(RESP)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8005)); s.listen(4096)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=short, args=(c,), daemon=True).start()
"""


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def in_ns(ns, *cmd):
    return ["ip", "netns", "exec", ns, *cmd]


def make_path():
    for ns in (CLIENT, ROUTER, SERVER):
        sh("ip", "netns", "add", ns)
        sh(*in_ns(ns, "ip", "link", "set", "lo", "up"))
    sh("ip", "link", "add", "c0", "netns", CLIENT, "type", "veth", "peer", "rc", "netns", ROUTER)
    sh("ip", "link", "add", "s0", "netns", SERVER, "type", "veth", "peer", "rs", "netns", ROUTER)
    for ns, dev, addr in ((CLIENT, "c0", f"{CLIENT_ADDR}/24"), (ROUTER, "rc", "198.18.0.254/24"),
                          (ROUTER, "rs", "198.19.0.254/24"), (SERVER, "s0", f"{SERVER_ADDR}/24")):
        sh(*in_ns(ns, "ip", "addr", "add", addr, "dev", dev))
        sh(*in_ns(ns, "ip", "link", "set", dev, "up", "mtu", "1500"))
        sh(*in_ns(ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off"),
           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sh(*in_ns(CLIENT, "ip", "route", "add", "default", "via", "198.18.0.254"))
    sh(*in_ns(SERVER, "ip", "route", "add", "default", "via", "198.19.0.254"))
    sh(*in_ns(ROUTER, "sysctl", "-qw", "net.ipv4.ip_forward=1"))
    for dev in ("rc", "rs"):  # the bottleneck, both ways: a 200 Mbit/s token bucket
        sh(*in_ns(ROUTER, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", RATE,
                  "burst", "32kb", "latency", "20ms"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/data")
    ap.add_argument("--workload", choices=["mix", "short"], default="mix")
    ap.add_argument("--name", help="file name stem (default: kernel-tcp-WORKLOAD)")
    ap.add_argument("--short", type=int, default=100_000, help="short workload: connections")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="mix workload: multiply every count and size (0.1 for a quick test)")
    ap.add_argument("--snaplen", action="append", choices=["128", "full"],
                    help="capture(s) to write (repeatable; default both)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("make_capture.py needs root (network namespaces and tcpdump)")
    for tool in ("ip", "ethtool", "tcpdump", "tc"):
        if not shutil.which(tool):
            sys.exit(f"make_capture.py needs {tool} (apt-get install iproute2 ethtool tcpdump)")
    name = args.name or f"kernel-tcp-{args.workload}"
    os.makedirs(args.out, exist_ok=True)
    procs = []

    def start(ns, *cmd, **kw):
        p = subprocess.Popen(in_ns(ns, *cmd), start_new_session=True, **kw)
        procs.append(p)
        return p

    def interrupted(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupted)
    try:
        make_path()
        outputs = [(os.path.join(args.out, f"{name}-{snap}.pcap"), "0" if snap == "full" else snap)
                   for snap in (args.snaplen or ["128", "full"])]
        dumps = [(path, start(ROUTER, "tcpdump", "-i", "rc", "-n", "-s", snap, "-B", "65536",
                              "-w", path, "tcp", stderr=subprocess.PIPE, text=True))
                 for path, snap in outputs]
        time.sleep(1.5)
        code = SHORT_SERVER_CODE if args.workload == "short" else SERVER_CODE
        server = start(SERVER, sys.executable, "-c", code, stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True)
        server.stdout.readline()
        started = time.time()
        client = [sys.executable, "-c", CLIENT_CODE]
        if args.workload == "short":
            jobs = [client + ["short", SERVER_ADDR, str(args.short)]]
        else:
            s = args.scale
            ccs = ("cubic", "bbr")
            jobs = [client + ["download", SERVER_ADDR, str(int(150e6 * s)), ccs[i % 2]]
                    for i in range(6)]
            jobs += [client + ["upload", SERVER_ADDR, str(int(100e6 * s)), ccs[i % 2]]
                     for i in range(2)]
            jobs += [client + ["rpc", SERVER_ADDR, str(int(80_000 * s)), str(i)] for i in range(6)]
            jobs += [client + ["get", SERVER_ADDR, str(int(2_000 * s))]]
        workers = [start(CLIENT, *job) for job in jobs]
        for w in workers:
            if w.wait() != 0:
                sys.exit(f"a client failed: {' '.join(w.args[-4:])}")
        print(f"workload took {time.time() - started:.1f} s", file=sys.stderr)
        time.sleep(1.0)
        for path, p in dumps:
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=120)
            counts = [line.strip() for line in err.splitlines() if "packets" in line]
            print(f"{path}: {os.path.getsize(path) / 1e6:,.0f} MB; tcpdump: {'; '.join(counts)}")
            dropped = [c for c in counts if "dropped by kernel" in c and not c.startswith("0 ")]
            if dropped:
                os.remove(path)
                sys.exit(f"tcpdump lost packets ({dropped[0]}): {path} removed; run again "
                         f"with one --snaplen at a time")
    finally:
        for p in procs:  # each in its own session: the group holds what it forked
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        for ns in (CLIENT, ROUTER, SERVER):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


if __name__ == "__main__":
    main()
