"""The `stalls` table's receive_window_limited against the sending kernel's
own tcpi_rwnd_limited, per transfer, on lab runs that carry the server's
tcp_info in their event logs (tests/test_stalls_receiver.py asserts it on
two runs; docs/whatif.md has the figures).

    python tools/stalls_rwnd.py OUT RUNS_JSON [--where factor=value ...]

RUNS_JSON: a lab listing (captures/lab/cross-region.runs.json,
captures/chapter-case/chapter-case.runs.json, ...). The direct runs that
match are ingested and analysed into a store in OUT (kept; made again only
when absent). Per connection: the server's data direction's time in the
state (whole flow) beside the kernel's last report for that connection
(cumulative), matched by the client's port. Printed: means, medians, the
Pearson correlation, how many agree within max(10 %, 10 ms), and the time
the state takes where the kernel says 0.
"""

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))


def kernel_rwnd_ms(runs, base):
    """{(run, client port): tcpi_rwnd_limited in ms, the connection's last report}."""
    out = {}
    for r in runs:
        path = os.path.join(base, r["run"], r["files"].get("server_log", "server-events.jsonl"))
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for e in map(json.loads, f):
                if e.get("kind") == "tcp_info" and "tcpi_rwnd_limited_us" in e:
                    out[(r["run"], e["remote_port"])] = e["tcpi_rwnd_limited_us"] / 1e3
    return out


def compare(con, kernel):
    """[(run, port, state ms, kernel ms)] of the connections the kernel reported."""
    rows = con.execute("""
        SELECT c.labels['run'], f.client_port,
               coalesce(sum(s.duration_ns) FILTER (s.state = 'receive_window_limited'), 0) / 1e6
        FROM flows f JOIN captures c USING (capture_id)
        LEFT JOIN stalls s ON s.capture_id = f.capture_id AND s.flow_id = f.flow_id
             AND s.direction = 's2c'
        WHERE f.protocol = 'tcp' GROUP BY ALL ORDER BY 1, 2""").fetchall()
    return [(run, port, ms, kernel[(run, port)]) for run, port, ms in rows
            if (run, port) in kernel]


def summary(pairs):
    x = np.array([p[2] for p in pairs])
    k = np.array([p[3] for p in pairs])
    agree = int((np.abs(x - k) <= np.maximum(0.1 * k, 10.0)).sum())
    r = np.corrcoef(x, k)[0, 1] if x.std() > 0 and k.std() > 0 else float("nan")
    return (f"{len(k)} transfers: state mean {x.mean():.0f} ms, median {np.median(x):.0f}, "
            f"in {(x > 0).sum()}; kernel mean {k.mean():.0f}, median {np.median(k):.0f}, "
            f"in {(k > 0).sum()}; correlation {r:.3f}; within max(10 %, 10 ms): {agree} of "
            f"{len(k)}; where the kernel says 0: {(x[k == 0] > 0).sum()} transfers, "
            f"{x[k == 0].sum():.1f} ms")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("runs_json")
    ap.add_argument("--where", action="append", default=[], help="factor=value")
    ap.add_argument("--each", action="store_true", help="print every transfer")
    args = ap.parse_args(argv)
    import duckdb
    import whatif_suite
    base = os.path.dirname(os.path.abspath(args.runs_json))
    with open(args.runs_json) as f:
        runs = json.load(f)
    want = dict(w.split("=", 1) for w in args.where)
    runs = [r for r in runs if all(str(r["factors"].get(k)) == v for k, v in want.items())]
    name = os.path.basename(args.runs_json).split(".")[0] + "".join(
        f"-{k}-{v}" for k, v in sorted(want.items()))
    os.makedirs(args.out, exist_ok=True)
    listing = os.path.join(args.out, f"{name}.runs.json")
    with open(listing, "w") as f:
        json.dump(runs, f)
    for r in runs:  # the runs' folders beside the listing, as the suite expects
        link = os.path.join(args.out, r["run"])
        if not os.path.exists(link):
            os.symlink(os.path.join(base, r["run"]), link)
    db = whatif_suite.store_for(name, listing, args.out)
    con = duckdb.connect(db, read_only=True)
    pairs = compare(con, kernel_rwnd_ms(runs, base))
    if args.each:
        for run, port, ms, k in pairs:
            print(f"{run} {port}: {ms:.1f} ms, kernel {k:.1f}")
    print(summary(pairs))


if __name__ == "__main__":
    main()
