"""The time-sequence chart of one long TCP flow: size, time and memory.

    python benchmarks/chart_scale.py                  # 300,000 packets, in benchmarks/data/
    python benchmarks/chart_scale.py --packets 50000 --out /tmp/x

Writes a pcap of one download (server capture, headers only: 54-byte
records of 1,500-byte packets): a handshake, a 100-byte request, then data
segments of 1,448 bytes every 100 us with one in 2,000 lost and resent after
three duplicate ACKs, the receiver ACKing every second segment, a 40 ms
RTT, FIN both ways. Ingests and analyses it (`tracekit ingest`, `analyze`),
then runs `tracekit plot time-sequence` (the whole flow, then a 0.2 s
stretch in full detail) and `tracekit report` in child processes and prints
the HTML and PNG sizes, the wall time and each child's peak RSS (getrusage).
"""

import argparse
import os
import struct
import subprocess
import sys
import time

CLIENT, SERVER = (198, 18, 0, 1), (198, 19, 0, 1)
CPORT, SPORT, MSS, OWD = 40000, 80, 1448, 0.020


def _frame(ts, src, dst, sport, dport, seq, ack, flags, payload):
    ip = struct.pack("!BBHHHBBH4B4B", 0x45, 0, 40 + payload, 0, 0x4000, 64, 6, 0, *src, *dst)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 0x50,
                      flags, 65535, 0, 0)
    eth = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00"
    data = eth + ip + tcp
    sec = int(ts)
    return struct.pack("<IIII", sec, int((ts - sec) * 1e6), len(data), len(data) + payload) + data


def packets(segments):
    """(ts, frame bytes) of the whole flow, in time order."""
    out, isn_c, isn_s = [], 1000, 50000
    syn, ack, psh_ack, fin_ack = 0x02, 0x10, 0x18, 0x11
    out.append((0.0, (CLIENT, SERVER, CPORT, SPORT, isn_c, 0, syn, 0)))
    out.append((0.0, (SERVER, CLIENT, SPORT, CPORT, isn_s, isn_c + 1, syn | ack, 0)))
    out.append((0.040, (CLIENT, SERVER, CPORT, SPORT, isn_c + 1, isn_s + 1, ack, 0)))
    out.append((0.040, (CLIENT, SERVER, CPORT, SPORT, isn_c + 1, isn_s + 1, psh_ack, 100)))
    c_seq, start, gap = isn_c + 101, 0.080, 0.0001
    lost = set(range(1000, segments - 10, 2000))
    arrive = {}  # segment -> time it reaches the client
    for i in range(segments):
        t = start + i * gap
        out.append((t, (SERVER, CLIENT, SPORT, CPORT, isn_s + 1 + i * MSS, c_seq, ack, MSS)))
        if i not in lost:
            arrive[i] = t + OWD
    for j in sorted(lost):  # resent when the third duplicate ACK reaches the server
        t = arrive[j + 3] + OWD + 0.00005
        out.append((t, (SERVER, CLIENT, SPORT, CPORT, isn_s + 1 + j * MSS, c_seq, ack, MSS)))
        arrive[j] = t + OWD
    # the client ACKs every second in-order segment, and each out-of-order one at once
    events = sorted((t, i) for i, t in arrive.items())
    have, nxt, count = set(), 0, 0
    for t, i in events:
        have.add(i)
        before = nxt
        while nxt in have:
            nxt += 1
        count += 1
        if nxt == before or nxt < len(have) or count % 2 == 0 or nxt == segments:
            out.append((t + OWD, (CLIENT, SERVER, CPORT, SPORT, c_seq, isn_s + 1 + nxt * MSS,
                                  ack, 0)))
    end = max(t for t, _ in out) + 0.001
    out.append((end, (SERVER, CLIENT, SPORT, CPORT, isn_s + 1 + segments * MSS, c_seq, fin_ack, 0)))
    out.append((end + OWD * 2, (CLIENT, SERVER, CPORT, SPORT, c_seq, isn_s + 2 + segments * MSS,
                                fin_ack, 0)))
    out.append((end + OWD * 4, (SERVER, CLIENT, SPORT, CPORT, isn_s + 2 + segments * MSS,
                                c_seq + 1, ack, 0)))
    out.sort(key=lambda p: p[0])
    return [(1.7e9 + t, fields) for t, fields in out]


def write_pcap(path, segments):
    flow = packets(segments)
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 54, 1))
        for ts, fields in flow:
            f.write(_frame(ts, *fields))
    return len(flow)


PEAK = """import resource, runpy, sys
sys.argv = ["tracekit", *sys.argv[1:]]
try:
    runpy.run_module("tracekit.cli", run_name="__main__")
finally:
    print(f"peak_rss_kb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", file=sys.stderr)
"""


def tracekit(*args):
    """Run `tracekit ARGS` in a child: (seconds, its peak RSS in MB)."""
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", PEAK, *args], capture_output=True, text=True,
                       env=env)
    if r.returncode:
        sys.exit(f"tracekit {args[0]} failed: {r.stderr.strip()}")
    peak = int(r.stderr.rsplit("peak_rss_kb=", 1)[1].split()[0]) / 1024
    return time.perf_counter() - started, peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=300_000)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "data"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    pcap, db = os.path.join(a.out, "long-flow.pcap"), os.path.join(a.out, "long-flow.duckdb")
    n = write_pcap(pcap, int(a.packets / 1.6))
    for suffix in ("", ".wal"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    print(f"capture: {n:,} packets, {os.path.getsize(pcap) / 1e6:.1f} MB ({pcap})")
    print(f"ingest: {tracekit('ingest', pcap, '--db', db)[0]:.1f} s; "
          f"analyze: {tracekit('analyze', '--db', db)[0]:.1f} s")
    stem = os.path.join(a.out, "long-flow-time-sequence")
    for label, extra in (("whole flow", []), ("--from 1 --to 1.2", ["--from", "1", "--to", "1.2"])):
        stem = os.path.join(a.out, "long-flow-time-sequence" + ("-zoom" if extra else ""))
        wall, peak = tracekit("plot", "time-sequence", "--db", db, "--flow", "0", "--out", stem,
                              *extra)
        print(f"plot time-sequence ({label}): {wall:.1f} s wall (HTML and PNG), peak RSS "
              f"{peak:.0f} MB, HTML {os.path.getsize(stem + '.html') / 1e6:.2f} MB, "
              f"PNG {os.path.getsize(stem + '.png') / 1e6:.2f} MB")
    page = os.path.join(a.out, "long-flow-report.html")
    wall, peak = tracekit("report", "--db", db, "--out", page)
    print(f"report: {wall:.1f} s wall, peak RSS {peak:.0f} MB, HTML "
          f"{os.path.getsize(page) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
