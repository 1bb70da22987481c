"""Recreate lossy-download-{client,server}.pcap (the recipe is the provenance).

tracekit's emulated WAN (tracekit/lab/wan.py): two network namespaces joined
by TUN devices, 10 ms each way (20 ms RTT), and scripted loss on the way down:
the 21st data segment of the connection is dropped twice, the 101st once. A
server sends one TTS-sized response (354,640 bytes) after a 3-byte request;
tcpdump captures it on both sides (nanosecond pcap, 128-byte snaplen). The
forwarder's drop log is written beside as lossy-download-drops.jsonl. Needs
root and tcpdump.

    sudo .venv/bin/python captures/make_lossy.py
"""

import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tracekit.lab.wan import SERVER_ADDR, Direction, EmulatedPath, PathSpec  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MSS = 1448
BODY = 354_640

SERVER = f"""
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("{SERVER_ADDR}", 8080))
s.listen()
print("up", flush=True)
c, _ = s.accept()
c.recv(100)
c.sendall(b"a" * {BODY})
c.close()
"""

CLIENT = f"""
import socket
s = socket.create_connection(("{SERVER_ADDR}", 8080))
s.sendall(b"GET")
n = 0
while True:
    d = s.recv(65536)
    if not d:
        break
    n += len(d)
assert n == {BODY}, n
"""


def main():
    if os.geteuid() != 0 or not shutil.which("tcpdump"):
        sys.exit("make_lossy.py needs root and tcpdump")
    down = Direction(delay_ms=10, drop_segments=((1 + 20 * MSS, 2), (1 + 100 * MSS, 1)))
    spec = PathSpec(up=Direction(delay_ms=10), down=down, seed=1)
    with EmulatedPath(spec, HERE) as path:
        server = subprocess.Popen(path.server([sys.executable, "-c", SERVER]),
                                  stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "up"
        dumps = []
        for side, cmd in (("client", path.client), ("server", path.server)):
            out = os.path.join(HERE, f"lossy-download-{side}.pcap")
            dump = subprocess.Popen(cmd(["tcpdump", "-i", "tk0", "-n", "-U", "--immediate-mode",
                                         "-s", "128", "--time-stamp-precision", "nano",
                                         "-w", out]), stderr=subprocess.PIPE, text=True)
            assert "listening on" in dump.stderr.readline()
            dumps.append(dump)
        subprocess.run(path.client([sys.executable, "-c", CLIENT]), check=True, timeout=60)
        server.wait(timeout=30)
        server.stdout.close()
        time.sleep(0.3)
        for d in dumps:
            d.send_signal(signal.SIGINT)
            d.wait(timeout=30)
            d.stderr.close()
    os.replace(path.drop_log, os.path.join(HERE, "lossy-download-drops.jsonl"))
    for name in ("deliveries.jsonl", "forwarder.json"):
        os.remove(os.path.join(HERE, name))


if __name__ == "__main__":
    main()
