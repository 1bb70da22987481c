"""A port scan: N SYNs, each its own TCP flow, ingested in a whole process.

    python benchmarks/scan.py --flows 1500000 --rate 1000
    python benchmarks/scan.py --flows 500000 --rate 100000 --limit-gb 4

Writes `benchmarks/data/scan-<N>-<rate>.pcap` (once; gitignored): one
scanner (10.0.0.1, source ports 1024-65023) sends a bare SYN to host
198.18.0.0 + (i mod 65,536), port 1 + (i div 65,536): N distinct
connections, 65,536 distinct targets, one packet each, `rate` SYNs a
second. Then runs `tracekit ingest` on it as its own process (with
`--limit-gb`, under that address-space limit, as `ulimit -v`) and prints
the peak RSS (ru_maxrss of the child), the seconds, and the flows the
store holds (which must be N).

Measured (2 shared cores, 2026-12-04; peak RSS of the ingest process;
"evicting": flows leave the table when over; "226 B": a flow's row of
226 bytes and 4-byte hash slots, decode/flows.py; times at load 6-11):

    flows      SYNs/s    before            evicting          226 B
    500 k      1,000     1,068 MiB  4.4 s    847 MiB  7.3 s    677 MiB 29.8 s
    500 k    100,000     1,064 MiB  3.8 s    977 MiB  4.2 s    711 MiB 24.3 s
    1.5 M      1,000     2,687 MiB 31.3 s    902-938 MiB       733-736 MiB 20-35 s
    1.5 M    100,000     2,748 MiB 19.2 s  1,325-1,358 MiB     914-929 MiB 22-37 s

(the last two rows' "evicting" and "226 B" runs alternated in one hour:
1,329 / 924 MiB, 902 / 733 MiB; twice more at 100,000/s: 1,330 / 915 and
1,325 / 914 MiB, 29.8 / 29.4 s and 28.8 / 22.0 s.)

At 100,000 SYNs/s no flow is over before the capture ends (5 minutes of
silence), so the table holds all 1.5 M. Before, a live flow cost a
296-byte row (grown by half) and a 96-byte hash slot (2-4 a flow, the
table doubled at 3/4), and the payload keeper 65 bytes (doubled by
copying): ~700 bytes. Now the endpoints are stored once in the row and the
hash table holds int32 row numbers at most half full; counters are int64,
int32 or int8 by their range; rows grow in place by a sixteenth; the
keeper holds 17 bytes for a flow without data; the flows still live at the
end are written 65,536 at a time: ~250 bytes (tests/test_flow_memory.py
checks it from the arrays). The rows are the same: flows and packets of
both scans, and the 36 relations of the demo store and of the 27 shared
captures, EXCEPT ALL both ways (tools/same_tables.py), also with eviction
forced (every batch, 64 packets) and with 1 s / 0.2 s flow timeouts, both
as Python and compiled.

Under `--limit-gb 4` (address space) the 1.5 M scan at 1,000/s ended before
the eviction work in "internal error: MemoryError ... (2097152, 30) int64";
now both rates are ingested (1,000/s: 729 MiB; 100,000/s: 940 MiB, which
ran out of address space at 1,358 MiB RSS before this change).
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PACKET = 14 + 20 + 24  # Ethernet, IPv4, TCP with an MSS option


def write_scan(path, flows, rate):
    """The pcap of `flows` SYNs at `rate` a second (vectorised, in blocks)."""
    with open(path + ".part", "wb") as f:
        f.write(np.array([0xA1B2C3D4], "<u4").tobytes()
                + np.array([2, 4], "<u2").tobytes()
                + np.array([0, 0, 65535, 1], "<u4").tobytes())
        for start in range(0, flows, 1 << 18):
            i = np.arange(start, min(flows, start + (1 << 18)), dtype=np.int64)
            rec = np.zeros((len(i), 16 + PACKET), np.uint8)
            t_us = i * 1_000_000 // rate + 1_700_000_000 * 1_000_000
            rec[:, 0:4] = (t_us // 1_000_000).astype("<u4").view(np.uint8).reshape(-1, 4)
            rec[:, 4:8] = (t_us % 1_000_000).astype("<u4").view(np.uint8).reshape(-1, 4)
            rec[:, 8:12] = np.array([PACKET], "<u4").view(np.uint8)
            rec[:, 12:16] = np.array([PACKET], "<u4").view(np.uint8)
            p = rec[:, 16:]
            p[:, 0:6] = [2, 0, 0, 0, 0, 2]
            p[:, 6:12] = [2, 0, 0, 0, 0, 1]
            p[:, 12:14] = [0x08, 0x00]
            ip = p[:, 14:34]
            ip[:, 0] = 0x45
            ip[:, 2:4] = np.array([20 + 24], ">u2").view(np.uint8)
            ip[:, 8] = 64
            ip[:, 9] = 6
            ip[:, 12:16] = [10, 0, 0, 1]
            dst = 0xC6120000 + (i % 65536)
            ip[:, 16:20] = dst.astype(">u4").view(np.uint8).reshape(-1, 4)
            words = ip.astype(np.uint32).reshape(-1, 10, 2)
            s = (words[:, :, 0] << 8 | words[:, :, 1]).sum(axis=1)
            s = (s & 0xFFFF) + (s >> 16)
            s = (s & 0xFFFF) + (s >> 16)
            ip[:, 10:12] = (~s & 0xFFFF).astype(">u2").view(np.uint8).reshape(-1, 2)
            tcp = p[:, 34:]
            tcp[:, 0:2] = (1024 + i % 64000).astype(">u2").view(np.uint8).reshape(-1, 2)
            tcp[:, 2:4] = (1 + i // 65536).astype(">u2").view(np.uint8).reshape(-1, 2)
            tcp[:, 4:8] = (i * 2654435761 % (1 << 32)).astype(">u4").view(np.uint8).reshape(-1, 4)
            tcp[:, 12] = 6 << 4
            tcp[:, 13] = 0x02
            tcp[:, 14:16] = [0x04, 0x00]
            tcp[:, 20:24] = [2, 4, 0x05, 0xB4]
            f.write(rec.tobytes())
    os.replace(path + ".part", path)


def ingest(pcap, limit_gb):
    """(seconds, peak RSS MiB, exit status, last stderr line, flows stored)."""
    root = os.path.dirname(HERE)
    with tempfile.TemporaryDirectory(dir=os.path.join(HERE, "data")) as tmp:
        db = os.path.join(tmp, "scan.duckdb")
        env = {**os.environ, "PYTHONPATH": root}

        def limit():
            if limit_gb:
                n = int(limit_gb * 2**30)
                resource.setrlimit(resource.RLIMIT_AS, (n, n))

        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "tracekit.cli", "ingest", pcap,
                                 "--db", db], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=env, preexec_fn=limit)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        err = proc.stderr.read().decode(errors="replace").strip().splitlines()
        proc.stderr.close()
        code = os.waitstatus_to_exitcode(status)
        flows = None
        if code == 0:
            import duckdb
            with duckdb.connect(db, read_only=True) as con:
                flows = con.execute("SELECT count(*) FROM flows").fetchone()[0]
        return seconds, usage.ru_maxrss / 1024, code, err[-1] if err else "", flows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flows", type=int, default=1_500_000)
    ap.add_argument("--rate", type=int, default=1000, help="SYNs a second")
    ap.add_argument("--limit-gb", type=float, default=0, help="address-space limit (ulimit -v)")
    args = ap.parse_args()
    os.makedirs(os.path.join(HERE, "data"), exist_ok=True)
    pcap = os.path.join(HERE, "data", f"scan-{args.flows}-{args.rate}.pcap")
    if not os.path.exists(pcap):
        write_scan(pcap, args.flows, args.rate)
    seconds, mib, code, err, flows = ingest(pcap, args.limit_gb)
    print(f"flows {args.flows:,}  rate {args.rate:,}/s  {os.path.getsize(pcap) / 1e6:.0f} MB  "
          f"exit {code}  peak RSS {mib:,.0f} MiB  {seconds:.1f} s  flows stored {flows}"
          + (f"\n  {err}" if code else ""))


if __name__ == "__main__":
    main()
