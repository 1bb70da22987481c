#!/usr/bin/env python3
"""Driver: namespaces s16-c / s16-s joined by delayline.py (RTT 60 ms, 16 Mbit/s IP bytes s->c,
60,000-byte drop-tail queue, optional random s->c loss with drop log); server.py (T_c, S) and
client.py; tcpdump at both ends (128-byte snaplen). Reno in the server ns (already allowed on
the host: no host-global sysctl touched). Cleans up by PID and namespace name.
usage: run.py TAG LOSS SEED MODE [N]"""
import json, os, signal, subprocess, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
CNS, SNS, CDEV, SDEV = "s16-c", "s16-s", "s16c0", "s16s0"
CADDR, SADDR = "198.18.16.1", "198.18.16.2"
RTT, RATE, QUEUE, TC, SIZE = 60, 16e6, int(os.environ.get("S16_QUEUE", "60000")), 120, 300000
tag, loss, seed, mode = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
N = int(sys.argv[5]) if len(sys.argv) > 5 else 6
OUT = os.path.join(HERE, "runs"); os.makedirs(OUT, exist_ok=True)
name = "%s-%s" % (tag, mode)
procs = []
def sh(*a): subprocess.run(list(a), check=True)
def nsx(ns, *a): return ["ip", "netns", "exec", ns] + list(a)
def start(a, **kw):
    p = subprocess.Popen(a, **kw); procs.append(p); return p
def teardown():
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            try: p.wait(8)
            except subprocess.TimeoutExpired: p.kill(); p.wait()
    for ns in (CNS, SNS):
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
try:
    for ns in (CNS, SNS):
        sh("ip", "netns", "add", ns); sh("ip", "-n", ns, "link", "set", "lo", "up")
        for k, v in (("net.ipv6.conf.all.disable_ipv6", "1"), ("net.ipv4.tcp_no_metrics_save", "1")):
            sh(*nsx(ns, "sysctl", "-q", "-w", "%s=%s" % (k, v)))
    sh(*nsx(SNS, "sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=reno"))
    cc = subprocess.run(nsx(SNS, "sysctl", "-n", "net.ipv4.tcp_congestion_control"), capture_output=True, text=True).stdout.strip()
    ccc = subprocess.run(nsx(CNS, "sysctl", "-n", "net.ipv4.tcp_congestion_control"), capture_output=True, text=True).stdout.strip()
    dlerr = open(os.path.join(OUT, "delayline-%s.err" % name), "w")
    dl = start([sys.executable, os.path.join(HERE, "delayline.py"), "--rtt", str(RTT), "--rt", "--rate", repr(RATE),
                "--queue", str(QUEUE), "--loss", repr(loss), "--seed", str(seed),
                "--drop-log", os.path.join(OUT, "drops-%s.jsonl" % name), "--cns", CNS, "--sns", SNS,
                "--cdev", CDEV, "--sdev", SDEV, "--caddr", CADDR, "--saddr", SADDR],
               stdout=subprocess.PIPE, stderr=dlerr, text=True)
    if dl.stdout.readline().strip() != "READY": raise RuntimeError("delayline")
    for f in ("server-events-%s.jsonl" % name, "client-events-%s.jsonl" % name):
        open(os.path.join(OUT, f), "w").close()
    srv = start(nsx(SNS, sys.executable, os.path.join(HERE, "server.py"), "8080", str(TC), str(SIZE),
                    os.path.join(OUT, "server-events-%s.jsonl" % name), name), stdout=subprocess.PIPE, text=True)
    if srv.stdout.readline().strip() != "serving": raise RuntimeError("server")
    tds = []
    for ns, dev, f in ((CNS, CDEV, "c-%s.pcap" % name), (SNS, SDEV, "s-%s.pcap" % name)):
        tds.append(start(nsx(ns, "tcpdump", "-i", dev, "-s", "128", "-U", "--immediate-mode", "-w", os.path.join(OUT, f)),
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(OUT, "tcpdump-%s.err" % f), "w")))
    time.sleep(1.0)
    load = os.getloadavg()[0]
    cp = subprocess.run(nsx(CNS, sys.executable, os.path.join(HERE, "client.py"), SADDR, "8080", mode, str(N),
                            os.path.join(OUT, "client-events-%s.jsonl" % name), name, name, "0.3" if mode == "fresh" else "0"),
                        capture_output=True, text=True, check=True)
    own = json.loads(cp.stdout)
    time.sleep(2.0)
finally:
    teardown()
stats = {}
for line in open(os.path.join(OUT, "delayline-%s.err" % name)):
    if line.startswith("delayline rtt="):
        stats = eval(line.split("stats=", 1)[1], {})
json.dump(dict(name=name, rtt_ms=RTT, rate=RATE, queue=QUEUE, loss=loss, seed=seed, tc_ms=TC, size=SIZE, mode=mode,
               server_cc=cc, client_cc=ccc, load_before=load, client=own, delayline=stats),
          open(os.path.join(OUT, "truth-%s.json" % name), "w"), indent=1)
print(name, "cc", cc, "own_ms", [round(o["own_ms"], 1) for o in own], "drops", stats.get("s2c_drops"),
      "q", stats.get("s2c_drops_queue"), "rand", stats.get("s2c_drops_random"), "late_mean_us", stats.get("late_mean_us"),
      "late_max_us", stats.get("late_max_us"), "load", load)
