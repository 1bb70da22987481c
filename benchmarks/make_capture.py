"""Make a benchmark capture of real kernel TCP: many short connections + bulk.

Runs a server and clients inside a private network namespace (loopback with
MTU 1500 and segmentation offloads off, so every packet is an MTU-sized
segment as on a real wire) while tcpdump writes one capture at a 128-byte
snaplen and one at full snaplen. Needs root, iproute2, ethtool and tcpdump.

    python benchmarks/make_capture.py --out benchmarks/data --short 100000 --bulk-mb 1000

Prints the files written and tcpdump's own packet and drop counts. Removes
the namespace and every process it started, also after an error or Ctrl-C.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

NS = f"tkbench{os.getpid()}"
ADDR = "127.0.0.1"

SERVER = r"""
import socket, threading, sys
RESP = b"r" * 1000
def short(conn):
    with conn:
        while True:
            d = conn.recv(4096)
            if not d:
                return
            conn.sendall(RESP)
def bulk(conn):
    with conn:
        n = int(conn.recv(64).decode())
        chunk = b"b" * (1 << 20)
        while n > 0:
            conn.sendall(chunk[:min(n, len(chunk))])
            n -= len(chunk)
def serve(port, handler):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port)); s.listen(1024)
    while True:
        c, _ = s.accept()
        threading.Thread(target=handler, args=(c,), daemon=True).start()
threading.Thread(target=serve, args=(8001, short), daemon=True).start()
threading.Thread(target=serve, args=(8002, bulk), daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""

CLIENT = r"""
import socket, sys, threading
short_n, bulk_bytes, bulk_streams = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def bulk():
    s = socket.create_connection(("127.0.0.1", 8002))
    s.sendall(str(bulk_bytes // bulk_streams).encode())
    got = 0
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        got += len(d)
    s.close()
threads = [threading.Thread(target=bulk) for _ in range(bulk_streams)]
for t in threads: t.start()
for i in range(short_n):
    s = socket.create_connection(("127.0.0.1", 8001))
    s.sendall(b"q" * 100)
    got = 0
    while got < 1000:
        got += len(s.recv(4096))
    s.close()
for t in threads: t.join()
"""


def ns(*cmd, **kw):
    return subprocess.run(["ip", "netns", "exec", NS, *cmd], check=True, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/data")
    ap.add_argument("--short", type=int, default=100_000, help="short connections")
    ap.add_argument("--bulk-mb", type=int, default=1000, help="bulk bytes in MB (1e6)")
    ap.add_argument("--bulk-streams", type=int, default=4)
    ap.add_argument("--name", default="kernel-tcp")
    ap.add_argument("--snaplen", action="append", choices=["128", "full"],
                    help="capture(s) to write (repeatable; default both). Two tcpdumps on "
                         "one busy interface can drop packets: write one at a time for a "
                         "complete capture")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("make_capture.py needs root (network namespaces and tcpdump)")
    for tool in ("ip", "ethtool", "tcpdump"):
        if not shutil.which(tool):
            sys.exit(f"make_capture.py needs {tool} (apt-get install iproute2 ethtool tcpdump)")
    os.makedirs(args.out, exist_ok=True)
    procs = []
    subprocess.run(["ip", "netns", "add", NS], check=True)
    try:
        ns("ip", "link", "set", "lo", "up")
        ns("ip", "link", "set", "lo", "mtu", "1500")
        ns("ethtool", "-K", "lo", "tso", "off", "gso", "off", "gro", "off",
           stdout=subprocess.DEVNULL)
        outputs = [(os.path.join(args.out, f"{args.name}-{snap}.pcap"),
                    "0" if snap == "full" else snap)
                   for snap in (args.snaplen or ["128", "full"])]
        dumps = []
        for path, snap in outputs:
            p = subprocess.Popen(["ip", "netns", "exec", NS, "tcpdump", "-i", "lo", "-n",
                                  "-s", snap, "-B", "262144", "-w", path, "tcp"],
                                 stderr=subprocess.PIPE, text=True)
            procs.append(p)
            dumps.append((path, p))
        time.sleep(1.5)
        server = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, "-c", SERVER],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(server)
        server.stdout.readline()
        started = time.time()
        ns(sys.executable, "-c", CLIENT, str(args.short), str(args.bulk_mb * 1_000_000),
           str(args.bulk_streams))
        print(f"workload took {time.time() - started:.1f} s", file=sys.stderr)
        time.sleep(1.0)
        for path, p in dumps:
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=60)
            counts = " ".join(line.strip() for line in err.splitlines() if "packets" in line)
            print(f"{path}: {os.path.getsize(path) / 1e6:.0f} MB; tcpdump: {counts}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        subprocess.run(["ip", "netns", "del", NS], check=False)


if __name__ == "__main__":
    main()
