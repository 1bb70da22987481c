#!/usr/bin/env python3
"""Make client+server captures of HTTP/1.1 downloads through delayline.py.

Set 18: namespaces s18-c (client, 198.18.88.1, TUN s18c0) and s18-s (server,
198.18.88.2, TUN s18s0), joined by the user-space delay line (RTTs, rate,
queue, random loss and seed from the command line). A fresh delay line (fresh
TUN pair) is started for every run, seeded with --seed + the run's index.
The server namespace's congestion control is --cc (added to the host-global
net.ipv4.tcp_allowed_congestion_control if needed; the old value is put back
at the end, also after an error).
Set 18 adds the delay line's Gilbert-Elliott bursty loss (--ge-p-gb etc.,
levels --ge-levels off/on), one or two --rtts, and --rounds.
Outputs c-{tag}-rtt{R}-{ge}-{mode}-{r}.pcap, s-{tag}-rtt{R}-{mode}-{r}.pcap,
drops-{tag}-rtt{R}-{mode}-{r}.jsonl, times-{tag}.json, runs-{tag}.json
(delay-line stats per run), logs/.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CNS, SNS = "s18-c", "s18-s"
CDEV, SDEV = "s18c0", "s18s0"
CADDR, SADDR = "198.18.88.1", "198.18.88.2"
URL = "http://%s:8080/blob" % SADDR
ALLOWED = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
A = None  # command-line arguments
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


def start_delayline(rtt, tag, seed, drop_log, ge):
    err = open(os.path.join(LOGS, "delayline-%s.err" % tag), "w")
    p = start([sys.executable, os.path.join(HERE, "delayline.py"), "--rtt", str(rtt), "--rt",
               "--rate", repr(A.rate), "--queue", str(A.queue),
               "--loss", repr(A.loss), "--seed", str(seed), "--drop-log", drop_log,
               "--cns", CNS, "--sns", SNS, "--cdev", CDEV, "--sdev", SDEV,
               "--caddr", CADDR, "--saddr", SADDR,
               "--ge-p-gb", repr(A.ge_p_gb if ge == "ge" else 0.0), "--ge-p-bg", repr(A.ge_p_bg),
               "--ge-loss-bad", repr(A.ge_loss_bad), "--ge-loss-good", repr(A.ge_loss_good)],
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


def cpu_busy(span=3.0):
    """Fraction of all CPUs busy over the next `span` seconds (/proc/stat)."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle+iowait
    t1, i1 = snap()
    time.sleep(span)
    t2, i2 = snap()
    return 1.0 - (i2 - i1) / max(1, t2 - t1)


def wait_load(limit=1.5, busy_limit=0.25, max_wait=30):
    """Wait (up to max_wait s) until the 1-min load average is <= limit and
    the machine was mostly idle (< busy_limit of its CPUs) for 3 s."""
    t0 = time.time()
    while time.time() - t0 < max_wait:
        busy = cpu_busy()
        if os.getloadavg()[0] <= limit and busy < busy_limit:
            break
        time.sleep(2)
    return round(os.getloadavg()[0], 2), round(busy, 3), round(time.time() - t0, 1)


def one_run(rtt, ge, mode, r, seed):
    NFETCH = A.nfetch
    tag = "%s-rtt%d-%s-%s-%d" % (A.tag, rtt, ge, mode, r)
    cfile, sfile = "c-%s.pcap" % tag, "s-%s.pcap" % tag
    dfile = "drops-%s.jsonl" % tag
    load, busy, waited = wait_load()
    print("%s: load %.2f, cpu busy %.0f %% (waited %.0f s), seed %d" % (
        tag, load, 100 * busy, waited, seed), flush=True)
    dl, dlerr = start_delayline(rtt, tag, seed, os.path.join(HERE, dfile), ge)
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
        reuse = None
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
            reuse = dict(reused=reused, connected=connected)
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
    if not stats:
        raise RuntimeError("%s: no delay-line stats in %s" % (tag, dlerr))
    print("%s times=%s drops=%s (queue %s, random %s, burst %s of %s) late_mean_us=%s late_max_us=%s "
          "over_1ms=%s" % (
              tag, times, stats.get("s2c_drops"), stats.get("s2c_drops_queue"),
              stats.get("s2c_drops_random"), stats.get("s2c_drops_burst"), stats.get("loss_candidates"), stats.get("late_mean_us"),
              stats.get("late_max_us"), stats.get("late_over_1ms")), flush=True)
    return cfile, sfile, dfile, times, stats, dict(load_before=load, cpu_busy_before=busy, waited_s=waited,
                                                  reuse=reuse, curl_log=verbose_log)


def main():
    global A
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc", required=True, help="server namespace congestion control")
    ap.add_argument("--rate", type=float, required=True, help="s->c bit/s")
    ap.add_argument("--queue", type=int, required=True, help="s->c queue bytes")
    ap.add_argument("--loss", type=float, default=0.0, help="random s->c drop probability")
    ap.add_argument("--seed", type=int, default=0, help="first run's seed (+ run index)")
    ap.add_argument("--rtts", type=int, nargs="+", required=True)
    ap.add_argument("--ge-levels", nargs="+", default=["ge"], choices=["ge", "nl"],
                    help="bursty loss levels: ge (on), nl (none)")
    ap.add_argument("--ge-p-gb", type=float, default=0.0)
    ap.add_argument("--ge-p-bg", type=float, default=0.3)
    ap.add_argument("--ge-loss-bad", type=float, default=0.8)
    ap.add_argument("--ge-loss-good", type=float, default=0.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", type=int, required=True, help="response bytes")
    ap.add_argument("--nfetch", type=int, default=6)
    ap.add_argument("--tag", required=True, help="prefix of output filenames")
    A = ap.parse_args()
    if len(set(A.rtts)) != len(A.rtts) or len(set(A.ge_levels)) != len(A.ge_levels):
        ap.error("--rtts/--ge-levels: distinct values")
    os.makedirs(LOGS, exist_ok=True)
    os.makedirs(WWW, exist_ok=True)
    blob = os.path.join(WWW, "blob")
    if not (os.path.exists(blob) and os.path.getsize(blob) == A.size):
        with open(blob, "wb") as f:
            f.write(os.urandom(A.size))

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    times_all, runs = {}, []
    teardown_ns()  # stale leftovers from an earlier aborted run of this script
    old_allowed = None
    state = os.path.join(HERE, "sysctl-restore-%s.txt" % A.tag)
    try:
        setup_ns()
        with open(ALLOWED) as f:
            allowed = f.read().split()
        if A.cc not in allowed:
            old_allowed = " ".join(allowed)
            with open(state, "w") as f:  # for a manual restore if this dies hard
                f.write("%s=%s\n" % (ALLOWED, old_allowed))
            with open(ALLOWED, "w") as f:
                f.write(" ".join(allowed + [A.cc]))
            print("host tcp_allowed_congestion_control: %r -> %r" % (
                old_allowed, open(ALLOWED).read().strip()), flush=True)
        run(*nsx(SNS, "sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=" + A.cc))
        cc = subprocess.run(nsx(SNS, "sysctl", "-n", "net.ipv4.tcp_congestion_control"),
                            capture_output=True, text=True).stdout.strip()
        ccc = subprocess.run(nsx(CNS, "sysctl", "-n", "net.ipv4.tcp_congestion_control"),
                             capture_output=True, text=True).stdout.strip()
        if cc != A.cc:
            raise RuntimeError("server-ns congestion control is %r, not %r" % (cc, A.cc))
        print("server-ns congestion control:", cc, "client-ns:", ccc, flush=True)
        srv = start(nsx(SNS, sys.executable, "-c", SERVER_CODE, WWW),
                    stdout=open(os.path.join(LOGS, "server.out"), "w"),
                    stderr=open(os.path.join(LOGS, "server.err"), "w"))
        wait_listen()
        idx = 0
        conds = [(rtt, ge) for rtt in A.rtts for ge in A.ge_levels]
        for r in range(A.rounds):
            cs = conds if r % 2 == 0 else list(reversed(conds))
            for rtt, ge in cs:
                for mode in (("fresh", "persistent") if r % 2 == 0 else ("persistent", "fresh")):
                    seed = A.seed + idx
                    cfile, sfile, dfile, times, stats, extra = one_run(rtt, ge, mode, r, seed)
                    times_all[cfile] = times
                    times_all[sfile] = times
                    runs.append(dict(index=idx, rtt=rtt, ge=ge, mode=mode, round=r, seed=seed,
                                     client=cfile, server=sfile, drop_log=dfile,
                                     times=times, delayline=stats, **extra))
                    idx += 1
                    with open(os.path.join(HERE, "runs-%s.json" % A.tag), "w") as f:
                        json.dump(dict(args=vars(A), congestion_control=cc,
                                       client_congestion_control=ccc, runs=runs),
                                  f, indent=1)
        with open(os.path.join(HERE, "times-%s.json" % A.tag), "w") as f:
            json.dump(times_all, f, indent=1)
    finally:
        for p in list(procs):
            stop(p, signal.SIGTERM)
        teardown_ns()
        if old_allowed is not None:
            with open(ALLOWED, "w") as f:
                f.write(old_allowed)
            now = open(ALLOWED).read().strip()
            print("host tcp_allowed_congestion_control restored: %r" % now, flush=True)
            if now.split() == old_allowed.split():
                os.remove(state)


if __name__ == "__main__":
    main()
