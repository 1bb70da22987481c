"""How fast the lab's emulated path goes and how closely it keeps its schedule.

    sudo .venv/bin/python benchmarks/emulator.py [--rates 50,100,200,333,400] [--rounds 2]

For each configured bottleneck rate, at the chapter's 200 ms round trip
(queue: one bandwidth-delay product), a real kernel TCP download over the
path (tracekit.lab.calibrate: about 2.4 s worth of data at that rate plus
slow start), rounds alternating the rates (ascending, then descending).
Printed per rate, medians over rounds: the rate the client's capture saw
while the bottleneck never idled, the error of that rate, the one-way
delay's error upstream and the arrival's against the schedule downstream
(median, p99, max), the share of packets more than 0.5 ms late that no
disturbance explains, the forwarder's CPU time per second of the run, and
the CPU time the host took from this machine (steal) during the download.
Then the machine's cores and load.

Needs root, tcpdump and tshark.
"""

import argparse
import os
import statistics
import sys
import tempfile

from common import load

from tracekit.lab.calibrate import calibrate, unexplained
from tracekit.lab.wan import Direction, PathSpec

RTT_MS = 200


def spec(rate):
    bdp = int(rate * 1e6 / 8 * RTT_MS / 1e3)
    return PathSpec(up=Direction(delay_ms=RTT_MS / 2),
                    down=Direction(delay_ms=RTT_MS / 2, rate_mbps=rate, queue_bytes=bdp))


def one(rate, workdir):
    nbytes = int(rate * 1e6 / 8 * 2.4) + 8_000_000  # ~2.4 s at the rate, past slow start
    m, stats, probe = calibrate(spec(rate), workdir, nbytes)
    late = m.pop("late")
    n = m["up_error_ms"]["n"] + m["down_error_ms"]["n"]
    left = sum(len(unexplained(v, probe, m["lane_held"][way])) for way, v in late.items())
    return {"rate": m["rate_mbps"], "busy_s": m["busy_s"],
            "up": m["up_error_ms"], "down": m["down_error_ms"],
            "unexplained": left / n, "late": sum(map(len, late.values())) / n,
            "cpu": (stats["cpu_user_s"] + stats["cpu_system_s"]) / m["wall_s"],
            "steal": m["steal_cpu_s"] / (m["wall_s"] * m["cpus"])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="50,100,200,333,400")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("the lab needs root")
    rates = [float(r) for r in args.rates.split(",")]
    before = load()
    results = {r: [] for r in rates}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for rate in (rates if round_ % 2 == 0 else rates[::-1]):
                work = os.path.join(tmp, f"{rate:g}-{round_}")
                os.makedirs(work)
                r = one(rate, work)
                results[rate].append(r)
                print(f"round {round_ + 1}: {rate:g} Mbit/s: {r['rate']:.2f} Mbit/s, "
                      f"late {r['late']:.2%}, steal {r['steal']:.1%}", file=sys.stderr)
    after = load()

    def med(rows, f):
        return statistics.median(f(x) for x in rows)

    print("| configured | measured (median) | error | up error ms: median / p99 / max | "
          "down error ms: median / p99 / max | > 0.5 ms late | of them unexplained | "
          "forwarder CPU | host steal |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for rate in rates:
        rows = results[rate]
        got = med(rows, lambda x: x["rate"])
        cells = [f"{rate:g} Mbit/s", f"{got:.2f} Mbit/s", f"{got / rate - 1:+.2%}"]
        for way in ("up", "down"):
            cells.append(" / ".join(f"{med(rows, lambda x: x[way][k]):.3f}"
                                    for k in ("median", "p99", "max")))
        cells += [f"{med(rows, lambda x: x['late']):.2%}", f"{med(rows, lambda x: x['unexplained']):.2%}",
                  f"{med(rows, lambda x: x['cpu']):.2f} CPU", f"{med(rows, lambda x: x['steal']):.1%}"]
        print("| " + " | ".join(cells) + " |")
    print(f"\n{before[1]} cores; load {before[0]:.2f} before, {after[0]:.2f} after; "
          f"{args.rounds} rounds, RTT {RTT_MS} ms")


if __name__ == "__main__":
    main()
