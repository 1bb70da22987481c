"""The factor vocabulary: the same names as the lab's experiment files
(experiments/*.toml), the labels the lab writes and `tracekit whatif`.

    rtt_ms          base round trip (ms)
    rate_mbps       bottleneck rate (Mbit/s); label alias bottleneck_mbps
    loss_down       random loss of the response direction (0..1)
    loss_up         random loss of the request/ACK direction (0..1)
    processing_ms   the server's model time per request (ms)
    congestion      cubic, reno or bbr (the server's congestion control)
    connection      fresh (a connection per request) or persistent (one per
                    run, warmed: see warmup)
    initcwnd        the server's initial window (segments)
    queue_bytes     the bottleneck's queue (bytes, drop-tail)
    bucket_bytes    a token bucket at the bottleneck (as Linux's tbf): the
                    bytes more than a packet it lets through at once after
                    an idle; 0 a FIFO (read at a client capture: whatif)
    pacing          fq (the sender paces at 2x / 1.2x cwnd/srtt) or none
    jitter_ms       the round trip's spread: extra delay uniform in
                    [0, jitter/2) each way, never reordering (ms; the lab's)
    warmup          unmeasured requests before the first on a persistent
                    connection (the lab's level sets 1); 0: the first
                    request opens it (handshake and slow start in its time).
                    Unless stated, the store's runs at the target say
                    which; without them, 1. Stated, it also replaces
                    the warm-up a persistent group had (--set warmup=0:
                    what opening the connection costs its first request);
                    on fresh connections alone it is refused
    slow_start_after_idle  1: a persistent connection restarts from the
                    initial window after each pause; 0 keeps it (the lab's
                    persistent level)
    rcv_window      client (the client's receive window replayed as Linux
                    6.16+ offers it, calibrated from its ACKs: the default
                    where the ACKs show it) or unlimited (docs/whatif.md)
    path            direct; tunnel (kcptun with FEC sized for the loss, as
                    the lab's fec = "auto") or tunnel-arq (kcptun, ARQ only):
                    --set only, the calibration needs a direct path's runs
"""

from ..core.errors import TracekitError

FACTORS = {
    "rtt_ms": float, "rate_mbps": float, "loss_down": float, "loss_up": float,
    "processing_ms": float, "congestion": str, "connection": str, "initcwnd": int,
    "queue_bytes": float, "bucket_bytes": float, "pacing": str, "jitter_ms": float, "warmup": int,
    "slow_start_after_idle": int, "rcv_window": str, "path": str,
}
ALIASES = {"bottleneck_mbps": "rate_mbps", "loss": "loss_down"}
LAB_LABELS = {"rate_mbps": "bottleneck_mbps"}  # factor -> the label the lab writes for it
# the label (as_labels) -> every name a run's level of it may be labelled under:
# the lab writes bottleneck_mbps, a user may write the factor's own name
LABEL_NAMES = {"bottleneck_mbps": ("bottleneck_mbps", "rate_mbps"), "loss_down": ("loss_down", "loss")}
# a factor's level -> every value an attribute may say it with: a request's
# own column says `reused` where the factor says persistent (request_attributes.sql)
LEVEL_NAMES = {("connection", "persistent"): ("persistent", "reused")}
PATHS = ("direct", "tunnel", "tunnel-arq")  # tunnel: kcptun with FEC; tunnel-arq: ARQ only
CHOICES = {"congestion": ("cubic", "reno", "bbr"), "connection": ("fresh", "persistent"),
           "pacing": ("fq", "none"), "rcv_window": ("client", "unlimited"),
           "path": PATHS}
RANGES = {"loss_down": (0.0, 0.9), "loss_up": (0.0, 0.9), "rtt_ms": (0.01, 10_000.0),
          "rate_mbps": (0.01, 100_000.0), "processing_ms": (0.0, 1e6),
          "initcwnd": (1, 10_000), "queue_bytes": (1500.0, 1e10),
          "bucket_bytes": (0.0, 1e10), "jitter_ms": (0.0, 10_000.0),
          "warmup": (0, 100), "slow_start_after_idle": (0, 1)}


def parse(text, option="--set"):
    """{factor: value} of "a=1,b=x" (or several such strings)."""
    items = [text] if isinstance(text, str) else list(text or ())
    out = {}
    for item in items:
        for part in filter(None, (p.strip() for p in item.split(","))):
            if "=" not in part:
                raise TracekitError(f"{option} {part!r}: expected FACTOR=VALUE")
            k, v = (x.strip() for x in part.split("=", 1))
            k = ALIASES.get(k, k)
            out[k] = value(k, v, option)
    return out


def value(name, text, option="--set"):
    """One factor's value, checked against the vocabulary."""
    if name not in FACTORS:
        raise TracekitError(f"{option}: unknown factor {name!r}; known: {', '.join(FACTORS)}")
    kind = FACTORS[name]
    if name == "path" and str(text) != "direct" and option != "--set":
        raise TracekitError(f"{option} path={text}: the calibration reads a direct path's TCP "
                            "(a tunnel's client capture holds KCP datagrams); calibrate on "
                            "direct runs and --set path={text}")
    try:
        v = kind(text)
    except ValueError:
        raise TracekitError(f"{option} {name}={text}: not a {kind.__name__}") from None
    if name in CHOICES and v not in CHOICES[name]:
        raise TracekitError(f"{option} {name}={text}: one of {', '.join(CHOICES[name])}")
    if name in RANGES and not RANGES[name][0] <= v <= RANGES[name][1]:
        raise TracekitError(f"{option} {name}={text}: outside {RANGES[name][0]}..{RANGES[name][1]}")
    return v


def as_labels(levels):
    """{label: value} the store's requests carry for these factor levels (where
    the lab writes rate_mbps as bottleneck_mbps)."""
    out = {}
    for k, v in levels.items():
        out[LAB_LABELS.get(k, k)] = str(v)
    return out


def describe(labels):
    """{label: value} as the user names it: "rate_mbps=10.0, connection=fresh"
    (a factor named twice with one value -- --where rate_mbps=8 and --from
    rate_mbps=8, the second as the lab's label -- once)."""
    back = {label: factor for factor, label in LAB_LABELS.items()}
    out = []
    for k, v in (labels or {}).items():
        item = (back.get(k, k), v)
        if not any(n == item[0] and _same(w, v) for n, w in out):
            out.append(item)
    return ", ".join(f"{k}={v}" for k, v in out) or "the store"


def _same(a, b):
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)
