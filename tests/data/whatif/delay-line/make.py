#!/usr/bin/env python3
"""Make client+server captures of HTTP/1.1 downloads through delayline.py.

Namespaces tkrtt-c (client, 198.18.80.1) and tkrtt-s (server, 198.18.80.2),
joined by the user-space delay line (RTT 40 or 120 ms, 20 Mbit/s s->c, 100 kB
drop-tail queue). A fresh delay line (fresh TUN pair) is started for every run.
Outputs c-rtt{R}-{mode}-{r}.pcap, s-rtt{R}-{mode}-{r}.pcap, times.json,
runs.json (delay-line stats per run), logs/.
"""
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CNS, SNS = "tkrtt-c", "tkrtt-s"
CDEV, SDEV = "tkc0", "tks0"
SADDR = "198.18.80.2"
URL = "http://%s:8080/blob" % SADDR
NFETCH = 6
BLOB_SIZE = 400_000
WWW = os.path.join(HERE, "www")
LOGS = os.path.join(HERE, "logs")

SERVER_CODE = r"""
import functools, http.server, sys
http.server.SimpleHTTPRequestHandler.protocol_version = 'HTTP/1.1'
H = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
srv = http.server.ThreadingHTTPServer(('0.0.0.0', 8080), H)
print('serving', flush=True)
srv.serve_forever()
"""

procs = []  # every Popen we start, so finally can end them by PID


def run(*args, **kw):
    return subprocess.run(list(args), check=True, **kw)


def nsx(ns, *args):
    return ["ip", "netns", "exec", ns] + list(args)


def start(args, **kw):
    p = subprocess.Popen(args, **kw)
    procs.append(p)
    return p


def stop(p, sig=signal.SIGINT, timeout=10):
    if p.poll() is None:
        try:
            p.send_signal(sig)
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p in procs:
        procs.remove(p)
    return p.returncode


def setup_ns():
    for ns in (CNS, SNS):
        run("ip", "netns", "add", ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")
        for k, v in (("net.ipv6.conf.all.disable_ipv6", "1"),
                     ("net.ipv6.conf.default.disable_ipv6", "1"),
                     ("net.ipv4.tcp_no_metrics_save", "1")):
            run(*nsx(ns, "sysctl", "-q", "-w", "%s=%s" % (k, v)))


def teardown_ns():
    for ns in (CNS, SNS):
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


def start_delayline(rtt, tag):
    err = open(os.path.join(LOGS, "delayline-%s.err" % tag), "w")
    p = start([sys.executable, os.path.join(HERE, "delayline.py"), "--rtt", str(rtt), "--rt"],
              stdout=subprocess.PIPE, stderr=err, text=True)
    line = p.stdout.readline()
    if line.strip() != "READY":
        raise RuntimeError("delayline did not start: %r" % line)
    return p, err.name


def wait_listen(deadline=10):
    t0 = time.time()
    while time.time() - t0 < deadline:
        out = subprocess.run(nsx(SNS, "ss", "-Htln", "sport", "= :8080"),
                             capture_output=True, text=True).stdout
        if out.strip():
            return
        time.sleep(0.1)
    raise RuntimeError("server not listening")


def one_run(rtt, mode, r):
    tag = "rtt%d-%s-%d" % (rtt, mode, r)
    cfile, sfile = "c-%s.pcap" % tag, "s-%s.pcap" % tag
    dl, dlerr = start_delayline(rtt, tag)
    tds = []
    try:
        for ns, dev, f in ((CNS, CDEV, cfile), (SNS, SDEV, sfile)):
            tds.append(start(nsx(ns, "tcpdump", "-i", dev, "-s", "128", "-U",
                                 "--immediate-mode", "-w", os.path.join(HERE, f)),
                             stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(LOGS, "tcpdump-%s.err" % f), "w")))
        time.sleep(1.0)
        for p in tds:
            if p.poll() is not None:
                raise RuntimeError("tcpdump died")
        times = []
        verbose_log = None
        if mode == "fresh":
            for i in range(NFETCH):
                out = run(*nsx(CNS, "curl", "-s", "-o", "/dev/null", "-w",
                               "%{time_total}\n", URL),
                          capture_output=True, text=True).stdout
                times.append(float(out.strip()))
        else:
            args = ["curl", "-s", "-v", "-w", "%{time_total}\n"]
            for i in range(NFETCH):
                args += ["-o", "/dev/null", URL]
            cp = run(*nsx(CNS, *args), capture_output=True, text=True)
            times = [float(x) for x in cp.stdout.split()]
            verbose_log = os.path.join(LOGS, "curl-v-%s.log" % tag)
            with open(verbose_log, "w") as f:
                f.write(cp.stderr)
            reused = cp.stderr.count("Re-using existing connection")
            connected = cp.stderr.count("Connected to ")
            if reused != NFETCH - 1 or connected != 1:
                print("WARNING %s: reused=%d connected=%d" % (tag, reused, connected))
        if len(times) != NFETCH:
            raise RuntimeError("%s: got %d times" % (tag, len(times)))
        time.sleep(2.0)
    finally:
        for p in tds:
            stop(p, signal.SIGINT)
        stop(dl, signal.SIGINT)
    with open(dlerr) as f:
        dltext = f.read().strip()
    stats = {}
    for line in dltext.splitlines():
        if line.startswith("delayline rtt="):
            stats = eval(line.split("stats=", 1)[1], {})  # our own dict repr
    print("%s times=%s drops=%s late_mean_us=%s late_max_us=%s" % (
        tag, times, stats.get("s2c_drops"), stats.get("late_mean_us"),
        stats.get("late_max_us")), flush=True)
    return cfile, sfile, times, stats


def main():
    os.makedirs(LOGS, exist_ok=True)
    os.makedirs(WWW, exist_ok=True)
    blob = os.path.join(WWW, "blob")
    if not (os.path.exists(blob) and os.path.getsize(blob) == BLOB_SIZE):
        with open(blob, "wb") as f:
            f.write(os.urandom(BLOB_SIZE))

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    times_all, runs = {}, []
    teardown_ns()  # stale leftovers from an earlier aborted run of this script
    try:
        setup_ns()
        cc = subprocess.run(nsx(SNS, "sysctl", "-n", "net.ipv4.tcp_congestion_control"),
                            capture_output=True, text=True).stdout.strip()
        print("server-ns congestion control:", cc, flush=True)
        srv = start(nsx(SNS, sys.executable, "-c", SERVER_CODE, WWW),
                    stdout=open(os.path.join(LOGS, "server.out"), "w"),
                    stderr=open(os.path.join(LOGS, "server.err"), "w"))
        wait_listen()
        for r in (0, 1):
            rtts = (40, 120) if r == 0 else (120, 40)
            for rtt in rtts:
                for mode in ("fresh", "persistent"):
                    cfile, sfile, times, stats = one_run(rtt, mode, r)
                    times_all[cfile] = times
                    times_all[sfile] = times
                    runs.append(dict(rtt=rtt, mode=mode, round=r, client=cfile,
                                     server=sfile, times=times, delayline=stats))
        with open(os.path.join(HERE, "times.json"), "w") as f:
            json.dump(times_all, f, indent=1)
        with open(os.path.join(HERE, "runs.json"), "w") as f:
            json.dump(dict(congestion_control=cc, runs=runs), f, indent=1)
    finally:
        for p in list(procs):
            stop(p, signal.SIGTERM)
        teardown_ns()


if __name__ == "__main__":
    main()
