"""How tbf10-fresh.pcap and tbf40-fresh.pcap were made (README.md): three
namespaces (client, router, server), a tbf token bucket on the router's
interface towards the client, an HTTP/1.1 server (python's http.server), curl
fetching a 300,000-byte file four times, a connection each; client captures
at 10 and 40 Mbit/s. Root; `python make.py DIR`. Cleans up its namespaces."""
import os, subprocess, sys, time, signal
NS = ("tkhand-c", "tkhand-s", "tkhand-r"); ADDR = ("198.18.79.1", "198.18.79.6")
OUT = sys.argv[1] if len(sys.argv) > 1 else "tbf-router-runs"
def sh(*c): subprocess.run(c, check=True, capture_output=True)
def ns(n, *c): return ["ip", "netns", "exec", n, *c]
def setup():
    for n in NS:
        subprocess.run(["ip", "netns", "del", n], capture_output=True); sh("ip", "netns", "add", n); sh(*ns(n, "ip", "link", "set", "lo", "up"))
    sh("ip", "link", "add", "tkh0", "netns", NS[0], "type", "veth", "peer", "tkh1", "netns", NS[2])
    sh("ip", "link", "add", "tkh2", "netns", NS[2], "type", "veth", "peer", "tkh3", "netns", NS[1])
    for n, d, a in ((NS[0], "tkh0", "198.18.79.1/30"), (NS[2], "tkh1", "198.18.79.2/30"), (NS[2], "tkh2", "198.18.79.5/30"), (NS[1], "tkh3", "198.18.79.6/30")):
        sh(*ns(n, "ip", "addr", "add", a, "dev", d)); sh(*ns(n, "ip", "link", "set", d, "up"))
        sh(*ns(n, "ethtool", "-K", d, "tso", "off", "gso", "off", "gro", "off"))
    sh(*ns(NS[0], "ip", "route", "add", "default", "via", "198.18.79.2"))
    sh(*ns(NS[1], "ip", "route", "add", "default", "via", "198.18.79.5"))
    sh(*ns(NS[2], "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"))
def teardown():
    for n in NS: subprocess.run(["ip", "netns", "del", n], capture_output=True)
SERVER = ("import http.server as h, functools\n"
          "h.SimpleHTTPRequestHandler.protocol_version = 'HTTP/1.1'\n"
          "H = functools.partial(h.SimpleHTTPRequestHandler, directory=%r)\n"
          "h.ThreadingHTTPServer((%r, 8080), H).serve_forever()\n")
def main():
    os.makedirs(f"{OUT}/www", exist_ok=True)
    with open(f"{OUT}/www/blob", "wb") as f: f.write(os.urandom(300_000))
    setup(); procs = []
    try:
        srv = subprocess.Popen(ns(NS[1], sys.executable, "-c", SERVER % (f"{OUT}/www", ADDR[1])), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); procs.append(srv)
        for _ in range(100):
            if subprocess.run(ns(NS[0], "curl", "-s", "-o", "/dev/null", f"http://{ADDR[1]}:8080/blob"), capture_output=True).returncode == 0: break
            time.sleep(0.1)
        url = f"http://{ADDR[1]}:8080/blob"
        for rnd in range(1):
            for mbit in ((10, 40) if rnd == 0 else (40, 10)):
                sh(*ns(NS[2], "tc", "qdisc", "replace", "dev", "tkh1", "root", "tbf", "rate", f"{mbit}mbit", "burst", "16kb", "latency", "40ms"))
                for mode in ("fresh",):
                    cap = f"{OUT}/r{mbit}-{mode}-{rnd}.pcap"
                    td = subprocess.Popen(ns(NS[0], "tcpdump", "-i", "tkh0", "-s", "128", "-U", "--immediate-mode", "-w", cap), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                    time.sleep(1.0)
                    if mode == "fresh":
                        for i in range(4): sh(*ns(NS[0], "curl", "-s", "-o", "/dev/null", url))
                    else:
                        sh(*ns(NS[0], "curl", "-s", *sum([["-o", "/dev/null", url] for _ in range(6)], [])))
                    time.sleep(1.5); td.send_signal(signal.SIGINT); td.wait()
                    print(cap, os.path.getsize(cap), flush=True)
    finally:
        for p in procs: p.terminate(); p.wait()
        teardown()
main()
