"""The sender's window response by response, from Linux's tcp_probe tracepoint.

A server's trace (tracefs, `events/tcp/tcp_probe` filtered on its port,
docs/whatif.md, twenty-fifth round) has a line for every segment the
server's TCP receives, with the window and ssthresh as they were. A
request's data arriving starts a response; this prints, for every
connection that carried at least `--min-responses` of them, one JSON
object a line:

    {"port": client port, "handshake_rtt_ms": the first srtt,
     "responses": [{"start": [cwnd, ssthresh], "max": cwnd, "end": [cwnd, ssthresh],
                    "grew": [[segments acknowledged, cwnd], ...]}, ...]}

(ssthresh null while unset; `grew`: each change of the window, with the
cumulative ACK's distance from the response's start in full segments).

    python tools/cwnd_trace.py trace.txt [--min-responses 3] [--mss 1448]
"""

import argparse
import json
import re
import sys

LINE = re.compile(r" (\d+\.\d+): tcp_probe: .*?dest=[\d.]+:(\d+) .*?data_len=(\d+) "
                  r"snd_nxt=0x([0-9a-f]+) snd_una=0x([0-9a-f]+) snd_cwnd=(\d+) "
                  r"ssthresh=(\d+) .*?srtt=(\d+) .*?sock_cookie=([0-9a-f]+)")  # (IPv4)
UNSET = 2 ** 31 - 1


def connections(lines):
    """{(client port, socket cookie): [(t, data_len, snd_una, cwnd, ssthresh,
    srtt_us)]} in order (the cookie tells a reused port's connections apart)."""
    out = {}
    for line in lines:
        m = LINE.search(line)
        if m:
            t, port, dl, _, una, cwnd, ss, srtt, cookie = m.groups()
            out.setdefault((int(port), cookie), []).append(
                (float(t), int(dl), int(una, 16), int(cwnd), int(ss), int(srtt)))
    return out


def responses(rows, mss):
    """Per response (a request's data starts one): its window's story."""
    out, cur = [], None
    for t, dl, una, cwnd, ss, _ in rows:
        if dl > 0:  # the client's request
            cur = {"una": una, "rows": []}
            out.append(cur)
        if cur is not None:
            cur["rows"].append((una, cwnd, None if ss >= UNSET else ss))
    summary = []
    for r in out:
        rows_ = r["rows"]
        grew, last = [], rows_[0][1]
        for una, cwnd, _ in rows_:
            if cwnd != last:
                grew.append([((una - r["una"]) % 2 ** 32) // mss, cwnd])
                last = cwnd
        summary.append({"start": list(rows_[0][1:]), "max": max(x[1] for x in rows_),
                        "end": list(rows_[-1][1:]), "grew": grew})
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--min-responses", type=int, default=3)
    ap.add_argument("--mss", type=int, default=1448)
    a = ap.parse_args(argv)
    with open(a.trace) as f:
        conns = connections(f)
    for (port, _), rows in conns.items():
        rs = responses(rows, a.mss)
        if len(rs) >= a.min_responses:
            print(json.dumps({"port": port, "handshake_rtt_ms": rows[0][5] / 1e3,
                              "responses": rs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
