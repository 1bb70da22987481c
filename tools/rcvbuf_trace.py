"""What Linux's receiver read and its sender did, per connection, from the
kernel's own tracepoints (docs/whatif.md, "The receiver's clock").

    python tools/rcvbuf_trace.py TRACE [--port 8080] [--mss 1448]

TRACE is the text of /sys/kernel/tracing/trace with the events
tcp:tcp_rcvbuf_grow (at the client: each time its receive buffer grew,
with the bytes it had read in the last interval -- `copied` -- the
interval, and its RTT estimate) and tcp:tcp_probe (at the server: each
ACK it took in, with its congestion window and ssthresh) enabled, e.g.

    mount -t tracefs nodev /sys/kernel/tracing
    cd /sys/kernel/tracing
    echo 'sport == 8080 || dport == 8080' > events/tcp/tcp_rcvbuf_grow/filter
    echo 'sport == 8080' > events/tcp/tcp_probe/filter
    echo 1 > events/tcp/tcp_rcvbuf_grow/enable; echo 1 > events/tcp/tcp_probe/enable
    echo 1 > tracing_on; ...runs...; echo 0 > tracing_on; cat trace > TRACE

Printed as JSON, one object per client port in the order the trace met
them: `reads`, the first four readings that grew the buffer (bytes read in
the interval, in segments of `--mss`: the DRS reading tcp_rcvbuf_grow took
as its new value), `rtt_ms` the receiver's RTT estimate at each, and, where
the server's probes are in the trace, `exit_cwnd`: the window at which the
sender first set ssthresh while nothing was lost (HyStart ending the first
slow start), with `max_cwnd`.
"""

import argparse
import json
import re

GROW = re.compile(r"tcp_rcvbuf_grow: time=(\d+) rtt_us=(\d+) copied=(\d+) .*?sport=(\d+) dport=(\d+)")
PROBE = re.compile(r"tcp_probe: .*?src=\S+:(\d+) dest=\S+:(\d+) .*?snd_cwnd=(\d+) ssthresh=(\d+)")


def connections(lines, port=8080, mss=1448):
    out = {}

    def of(client):
        return out.setdefault(client, {"port": client, "reads": [], "rtt_ms": []})
    for line in lines:
        m = GROW.search(line)
        if m:
            _, rtt, copied, sport, dport = (int(x) for x in m.groups())
            if dport == port:
                c = of(sport)
                if len(c["reads"]) < 4:
                    c["reads"].append(round(copied / mss, 2))
                    c["rtt_ms"].append(rtt / 1000)
            continue
        m = PROBE.search(line)
        if m:
            sport, dport, cwnd, ssthresh = (int(x) for x in m.groups())
            if sport == port:
                c = of(dport)
                c["max_cwnd"] = max(c.get("max_cwnd", 0), cwnd)
                if ssthresh < 2 ** 31 - 1 and "exit_cwnd" not in c:
                    c["exit_cwnd"] = ssthresh
    return list(out.values())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--mss", type=int, default=1448)
    args = ap.parse_args(argv)
    with open(args.trace) as f:
        for c in connections(f, args.port, args.mss):
            print(json.dumps(c))


if __name__ == "__main__":
    main()
