"""Recreate the sample captures in this folder (the recipe is the provenance).

Two network namespaces joined by a veth pair (198.18.0.1 client, 198.18.0.2
server, MTU 1500, offloads off so every packet is a real segment), a Python
HTTP/1.1 server sending a fixed 354,640-byte body, and a client that makes
three requests on fresh connections and three on one persistent
connection; tcpdump on the client side writes a nanosecond pcap at a 128-byte
snaplen. A second capture, written by dumpcap as pcapng, holds a small UDP
request/response exchange. Needs root, iproute2, ethtool, tcpdump, dumpcap.

    sudo python captures/make_samples.py
"""

import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_NS, SERVER_NS = f"tkc{os.getpid()}", f"tks{os.getpid()}"
CLIENT, SERVER = "198.18.0.1", "198.18.0.2"
BODY = 354_640

SERVER_CODE = rf"""
import http.server, socket, socketserver, threading
BODY = b"a" * {BODY}
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("{SERVER}", 5353))
    while True:
        d, a = s.recvfrom(2048)
        s.sendto(d.upper(), a)
threading.Thread(target=udp, daemon=True).start()
srv = S(("{SERVER}", 8080), H)
print("ready", flush=True)
srv.serve_forever()
"""

CLIENT_CODE = rf"""
import http.client, socket, time
for i in range(3):  # fresh connection per request
    c = http.client.HTTPConnection("{SERVER}", 8080)
    c.request("GET", "/tts?fresh=%d" % i)
    assert len(c.getresponse().read()) == {BODY}
    c.close()
    time.sleep(0.05)
c = http.client.HTTPConnection("{SERVER}", 8080)  # one persistent connection
for i in range(3):
    c.request("GET", "/tts?persistent=%d" % i)
    assert len(c.getresponse().read()) == {BODY}
    time.sleep(0.05)
c.close()
"""

UDP_CODE = rf"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
for i in range(5):
    s.sendto(b"hello %d" % i, ("{SERVER}", 5353))
    s.recvfrom(2048)
"""


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def in_ns(ns, *cmd):
    return ["ip", "netns", "exec", ns, *cmd]


def main():
    if os.geteuid() != 0:
        sys.exit("make_samples.py needs root")
    for tool in ("ip", "ethtool", "tcpdump", "dumpcap"):
        if not shutil.which(tool):
            sys.exit(f"make_samples.py needs {tool}")
    procs = []
    sh("ip", "netns", "add", CLIENT_NS)
    sh("ip", "netns", "add", SERVER_NS)
    try:
        sh("ip", "link", "add", "tkc0", "netns", CLIENT_NS, "type", "veth",
           "peer", "name", "tks0", "netns", SERVER_NS)
        for ns, dev, addr in ((CLIENT_NS, "tkc0", CLIENT), (SERVER_NS, "tks0", SERVER)):
            sh(*in_ns(ns, "ip", "addr", "add", f"{addr}/24", "dev", dev))
            sh(*in_ns(ns, "ip", "link", "set", dev, "up", "mtu", "1500"))
            sh(*in_ns(ns, "ip", "link", "set", "lo", "up"))
            sh(*in_ns(ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off"),
               stdout=subprocess.DEVNULL)
        server = subprocess.Popen(in_ns(SERVER_NS, sys.executable, "-c", SERVER_CODE),
                                  stdout=subprocess.PIPE, text=True)
        procs.append(server)
        server.stdout.readline()
        http_pcap = os.path.join(HERE, "http-fresh-vs-persistent.pcap")
        udp_pcapng = os.path.join(HERE, "udp-echo.pcapng")
        dump = subprocess.Popen(in_ns(CLIENT_NS, "tcpdump", "-i", "tkc0", "-n", "--immediate-mode", "-s", "128",
                                      "--time-stamp-precision", "nano", "-w", http_pcap, "tcp"),
                                stderr=subprocess.DEVNULL)
        procs.append(dump)
        time.sleep(1.5)
        sh(*in_ns(CLIENT_NS, sys.executable, "-c", CLIENT_CODE))
        time.sleep(0.5)
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=30)
        cap = subprocess.Popen(in_ns(CLIENT_NS, "dumpcap", "-q", "-i", "tkc0", "-f", "udp",
                                     "-w", udp_pcapng), stderr=subprocess.DEVNULL)
        procs.append(cap)
        time.sleep(1.5)
        sh(*in_ns(CLIENT_NS, sys.executable, "-c", UDP_CODE))
        time.sleep(0.5)
        cap.send_signal(signal.SIGINT)
        cap.wait(timeout=30)
        for path in (http_pcap, udp_pcapng):
            os.chmod(path, 0o644)
            print(f"{path}: {os.path.getsize(path):,} bytes")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        sh("ip", "netns", "del", CLIENT_NS)
        sh("ip", "netns", "del", SERVER_NS)


if __name__ == "__main__":
    main()
