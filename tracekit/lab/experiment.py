"""`tracekit lab run EXPERIMENT.toml`: single-factor experiments, interleaved.

An experiment file names the workload, the path, the factors and their
levels, trials and a seed:

    name = "tts-direct-vs-tunnel"
    workload = "tts"            # tts, asr or agent (tracekit.lab.tts.WORKLOADS), agent-tasks
                                # (rounds of an agent: tracekit.lab.agentrun), or
                                # streaming (tracekit.lab.streaming: requests = streams,
                                # chunks and initial_buffer_ms settings), multiplexing
                                # (tracekit.lab.muxrun: an image and timed audio on one
                                # connection; protocol h2/h3, scheduling fifo/priority)
    trials = 4                  # rounds; each round runs every combination once
    requests = 4                # requests per run
    response_bytes = 354640     # optional: the response's size (upload_bytes: bytes up)
    seed = 1
    [path]                      # the emulated WAN (tracekit.lab.wan)
    rtt_ms = 100                # split evenly between the two directions
    loss_down = 0.02            # Bernoulli loss server -> client
    rate_mbps = 50              # optional bottleneck, both directions
    jitter_ms = 2               # optional: extra 0..jitter/2 each way, no reordering
    burst_p_down = 0.01         # optional Gilbert-Elliott bursts downstream:
    burst_r_down = 0.3          #   good->bad, bad->good, loss in the bad state
    burst_loss_down = 0.8
    [factors]
    path = ["direct", "tunnel"]           # tunnel: kcptun with FEC (tracekit.lab.tunnel);
                                          # tunnel-<name>: another configuration of it
    connection = ["fresh", "persistent"]  # a connection per request, or one for all
    [fixed]                     # settings every run has (recorded as labels too)
    congestion = "cubic"
    [levels.connection.persistent]        # settings a level brings (how it is tuned)
    slow_start_after_idle = 0             # net.ipv4.tcp_slow_start_after_idle
    initcwnd = 10                          # the server's route initcwnd

A level's `warmup = N` sends N unmeasured requests first on the same
connection (a persistent connection measured warm).

Known factors: path (direct, tunnel), connection (fresh, persistent),
congestion (reno, cubic, bbr: the server namespace's default where the host
allows it to namespaces, else the TTS server's TCP_CONGESTION per socket),
loss_down, rtt_ms, rate_mbps (path settings), initcwnd (the server's route),
slow_start_after_idle (both), rcvbuf (the client's tcp_rmem ceiling),
socks (tunnel: reach it through a SOCKS5 proxy, microsocks, as Queqiao
presents itself),
quickack (the client's route: 1 = no delayed ACKs), fec (tunnel: "auto",
FEC and windows sized for the path's loss, or "none", ARQ only; unset:
kcptun's settings of tracekit.lab.tunnel), warmup, processing_ms
(the TTS server's model time per request, 30 ms by default); any
other factor is recorded as a label only. Each round runs every combination
of levels once, in an order that reverses every other round (A B, B A, ...)
so drift hits every arm alike. Each run gets its own pair of namespaces (no
TCP metrics cache or tunnel state is shared between runs), a client-side
capture (and one of the client's loopback for the tunnel, where the
application's connection is), both event logs, the emulator's logs and a
manifest.json with every setting. Then everything is ingested with the
factor levels, `run`, `trial` and `order` as labels.
"""

import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from dataclasses import asdict

from ..core.errors import TracekitError
from ..pipeline.manifests import lab_manifest
from . import netns
from .record import running, tcpdump
from .wan import SERVER_ADDR, Direction, EmulatedPath, PathSpec

WORKLOADS = ("tts", "asr", "agent", "streaming", "agent-tasks", "multiplexing")
STREAM_PORT = 9100
SOCKS_PORT = 1080
PATH_KEYS = {"rtt_ms", "loss_down", "loss_up", "rate_mbps", "queue_bytes", "bucket_bytes",
             "jitter_ms", "burst_p_down", "burst_r_down", "burst_loss_down"}
SERVER_PORT = 9200
SNAPLEN = 96  # IP + TCP with options (+ Ethernet on loopback): headers only
PROTOCOLS = ("tcp", "tls", "h2", "h3")
H3_PORT = 4433


def load(path):
    try:
        with open(path, "rb") as f:
            spec = tomllib.load(f)
    except OSError as e:
        raise TracekitError(f"{path}: cannot read: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise TracekitError(f"{path}: not valid TOML: {e}") from None
    if spec.get("workload", "tts") not in WORKLOADS:
        raise TracekitError(f"{path}: workload {spec.get('workload')!r} is not one of {WORKLOADS}")
    factors = spec.get("factors")
    if not isinstance(factors, dict) or not factors:
        raise TracekitError(f"{path}: an experiment needs [factors] with at least one factor")
    for name, levels in factors.items():
        if not isinstance(levels, list) or len(levels) < 2:
            raise TracekitError(f"{path}: factor {name!r} needs a list of at least two levels")
    unknown = set(spec.get("path", {})) - PATH_KEYS
    if unknown:
        raise TracekitError(f"{path}: unknown [path] settings {sorted(unknown)}; known: "
                            f"{sorted(PATH_KEYS)}")
    spec.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    name = spec["name"]
    if (not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name)
            or ".." in name):
        raise TracekitError(f"{path}: name {name!r} must be one file name of letters, digits, "
                            f"'.', '_' and '-' (it names the run folders under --out)")
    spec.setdefault("trials", 3)
    spec.setdefault("requests", 4)
    spec.setdefault("seed", 1)
    return spec


def _shape(spec):
    """(bytes up, bytes down): the workload's, or `upload_bytes` / `response_bytes`."""
    from .tts import WORKLOADS as SHAPES
    up, down = SHAPES[spec.get("workload", "tts")]
    return int(spec.get("upload_bytes", up)), int(spec.get("response_bytes", down))


def schedule(spec):
    """[(trial, order, {factor: level})]: every combination once per round,
    the order reversed every other round."""
    names = list(spec["factors"])
    combos = [dict(zip(names, values)) for values in itertools.product(*spec["factors"].values())]
    runs, order = [], 0
    for trial in range(spec["trials"]):
        for combo in (combos if trial % 2 == 0 else combos[::-1]):
            order += 1
            runs.append((trial, order, combo))
    return runs


def settings_of(spec, combo):
    """Every setting of one run: the path, then what each level brings."""
    s = {"path": "direct", "connection": "fresh", **spec.get("path", {}), **spec.get("fixed", {})}
    s.setdefault("rtt_ms", 50.0)
    for factor, level in combo.items():
        s[factor] = level
        s.update(spec.get("levels", {}).get(factor, {}).get(str(level), {}))
    return s


def _path_spec(s, seed):
    half = float(s["rtt_ms"]) / 2
    each_way = {"rate_mbps": s.get("rate_mbps"), "jitter_ms": float(s.get("jitter_ms", 0)) / 2,
                "queue_bytes": int(s.get("queue_bytes", 256_000)),
                "bucket_bytes": int(s.get("bucket_bytes", 0))}
    return PathSpec(up=Direction(delay_ms=half, loss=float(s.get("loss_up", 0)), **each_way),
                    down=Direction(delay_ms=half, loss=float(s.get("loss_down", 0)), **each_way,
                                   burst_p=float(s.get("burst_p_down", 0)),
                                   burst_r=float(s.get("burst_r_down", 1)),
                                   burst_loss=float(s.get("burst_loss_down", 1))),
                    seed=seed)


def is_tunnel(s):
    """A run through the tunnel: path level `tunnel`, or `tunnel-<name>` for
    another configuration of it (e.g. tunnel-arq with fec = "none")."""
    return str(s["path"]).split("-")[0] == "tunnel"


def _tunnel_sizing(s):
    """The tunnel's FEC and windows: kcptun's defaults, or with `fec = "auto"`
    (or "none": ARQ only) sized for the run's path (tunnel.sized_for)."""
    from .tunnel import sized_for
    fec = s.get("fec")
    if fec is None:
        return {}
    if fec not in ("auto", "none"):
        raise TracekitError(f"fec = {fec!r}: 'auto' (sized for the loss) or 'none' (ARQ only)")
    if not s.get("rate_mbps"):
        raise TracekitError("fec = 'auto' or 'none' sizes the tunnel's window for the path: "
                            "the experiment's [path] needs rate_mbps")
    queue = int(s["queue_bytes"]) if "queue_bytes" in s else None
    return sized_for(float(s.get("loss_down", 0)), float(s["rate_mbps"]), float(s["rtt_ms"]),
                     fec=fec == "auto", queue_bytes=queue)


def _tune(path, s, per_socket=False):
    """Kernel settings a run asks for, inside its namespaces.

    congestion: the server namespace's default when the host allows it to
    namespaces (net.ipv4.tcp_allowed_congestion_control); else, with
    `per_socket` (the TTS server sets TCP_CONGESTION on its listening socket:
    as root any available algorithm), nothing here; else refused."""
    if "congestion" in s:
        ca = s["congestion"]
        allowed = netns.run(*path.server(["sysctl", "-n",
                                          "net.ipv4.tcp_allowed_congestion_control"])).split()
        if ca in allowed:
            netns.run(*path.server(["sysctl", "-q", f"net.ipv4.tcp_congestion_control={ca}"]))
        elif not per_socket:
            raise TracekitError(f"congestion = {ca!r} is not in this host's "
                                f"net.ipv4.tcp_allowed_congestion_control ({' '.join(allowed)}) "
                                "and only the TTS workload sets it per socket")
    if "slow_start_after_idle" in s:
        for run_in in (path.client, path.server):
            netns.run(*run_in(["sysctl", "-q",
                               f"net.ipv4.tcp_slow_start_after_idle={int(s['slow_start_after_idle'])}"]))
    if "rcvbuf" in s:  # the client's largest receive buffer (autotuning's ceiling)
        v = int(s["rcvbuf"])
        netns.run(*path.client(["sysctl", "-q", f"net.ipv4.tcp_rmem=4096 {min(v, 131072)} {v}"]))
    if "quickack" in s:  # the client ACKs every segment at once (no delayed ACK)
        netns.run(*path.client(["ip", "route", "change", "198.19.0.0/16", "dev", "tk0",
                                "src", "198.18.0.1", "quickack", str(int(s["quickack"]))]))
    if "initcwnd" in s:  # the direct path's route; the tunnel's UDP is kcptun's own window
        netns.run(*path.server(["ip", "route", "change", "198.18.0.0/16", "dev", "tk0",
                                "src", SERVER_ADDR, "initcwnd", str(int(s["initcwnd"]))]))


def _other_runner(spec, protocol):
    """The run function of a run that is not the TTS shape over TCP/TLS/h2, or None."""
    if spec.get("workload") == "multiplexing":  # two streams on one connection (lab/muxrun.py)
        from .muxrun import run_multiplexing
        return run_multiplexing
    if protocol == "h3":
        return _run_h3
    if spec.get("workload") == "streaming":
        return _run_streaming
    if spec.get("workload") == "agent-tasks":  # rounds of an agent (lab/agentrun.py)
        from .agentrun import run_agent_tasks
        return run_agent_tasks
    return None


def run_one(spec, trial, order, combo, workdir):
    """One run; returns its manifest (also written as manifest.json)."""
    from .tts import PROCESSING_MS
    from .tunnel import Tunnel, TunnelSettings

    s = settings_of(spec, combo)
    run_id = f"{spec['name']}-{order:03d}"
    out = os.path.join(workdir, run_id)
    run_folder(out)
    seed = int(spec["seed"]) * 1000 + order
    pspec = _path_spec(s, seed)
    files = {"client_capture": os.path.join(out, "client.pcap"),
             "server_capture": os.path.join(out, "server.pcap"),
             "client_log": os.path.join(out, "client-events.jsonl"),
             "server_log": os.path.join(out, "server-events.jsonl")}
    protocol = s.get("protocol", "tcp")
    if protocol not in PROTOCOLS:
        raise TracekitError(f"protocol {protocol!r} is not one of {PROTOCOLS}")
    if protocol == "h3" and is_tunnel(s):
        raise TracekitError("h3 (QUIC) does not go through the kcptun tunnel (TCP only)")
    tunnel_settings = (TunnelSettings(target_port=SERVER_PORT,
                                      socks_port=SOCKS_PORT if s.get("socks") else 0,
                                      **_tunnel_sizing(s))
                       if is_tunnel(s) else None)
    snaplen = SNAPLEN if protocol == "tcp" else 1600  # TLS and QUIC parsing need the payload
    server_extra, client_extra = [], []
    if protocol in ("tls", "h2") and spec.get("workload") != "multiplexing":
        from .h3 import _certificate, private_file
        cert, key = _certificate(out)
        files["keylog"] = os.path.join(out, "keys.log")
        private_file(files["keylog"]).close()  # 0600 before the client appends secrets
        server_extra = ["--tls-cert", cert, "--tls-key", key]
        client_extra = ["--tls" if protocol == "tls" else "--h2", "--keylog", files["keylog"]]
    started = time.time()
    other = _other_runner(spec, protocol)
    if other is not None:
        return other(spec, s, trial, order, combo, out, files, pspec, run_id, started)
    with EmulatedPath(pspec, out) as path:
        _tune(path, s, per_socket=True)
        server_extra += ["--congestion", s["congestion"]] if "congestion" in s else []
        server_cmd = [sys.executable, "-m", "tracekit.lab.tts", "server", "--addr", "0.0.0.0",
                      "--port", str(SERVER_PORT), "--log", files["server_log"], *server_extra]
        with running(path.server, server_cmd, "TTS server"):
            up, down = _shape(spec)
            client_cmd = [sys.executable, "-m", "tracekit.lab.tts", "client",
                          "--log", files["client_log"], "--requests", str(spec["requests"]),
                          "--connection", s["connection"], "--run", run_id,
                          "--warmup", str(int(s.get("warmup", 0))),
                          "--upload-bytes", str(up), "--bytes", str(down),
                          "--processing-ms", str(float(s.get("processing_ms", PROCESSING_MS))),
                          *client_extra]
            if tunnel_settings:
                with Tunnel(path, tunnel_settings) as tunnel:
                    # warm the tunnel's session once (not measured, not logged)
                    subprocess.run(path.client([
                        sys.executable, "-m", "tracekit.lab.tts", "client", "--addr", tunnel.addr,
                        "--port", str(tunnel.port), "--log", os.devnull, "--requests", "1",
                        "--bytes", "1000", "--prefix", "warmup"]), check=True, timeout=60)
                    with _recording(path, files, out, snaplen, tunnel=True):
                        via = (["--socks", f"{tunnel.addr}:{SOCKS_PORT}"]
                               if tunnel_settings.socks_port else [])
                        subprocess.run(path.client(client_cmd + via + ["--addr", tunnel.addr, "--port",
                                                                       str(tunnel.port)]),
                                       check=True, timeout=600)
            else:
                with _recording(path, files, out, snaplen):
                    subprocess.run(path.client(client_cmd + ["--addr", SERVER_ADDR, "--port",
                                                             str(SERVER_PORT)]), check=True, timeout=600)
            time.sleep(0.3)  # the server's last tcp_info
    manifest = _manifest(spec, s, trial, order, combo, pspec, tunnel_settings, files, path,
                         started, run_id,
                         {"name": spec.get("workload", "tts"), "protocol": protocol,
                          "upload_bytes": up, "response_bytes": down,
                          "processing_ms": float(s.get("processing_ms", PROCESSING_MS)),
                          "requests": spec["requests"]})
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def _run_h3(spec, s, trial, order, combo, out, files, pspec, run_id, started):
    """One run of the TTS shape over HTTP/3 (aioquic): fresh = a QUIC
    connection per request, persistent = one for all (warmup requests first)."""
    from .tts import PROCESSING_MS

    up, down = _shape(spec)
    if up:
        raise TracekitError("the h3 workload carries downloads only (tts)")
    qlogs = {side: os.path.join(out, f"{side}-qlog") for side in ("client", "server")}
    files["client_log"] = os.path.join(out, "client-events.jsonl")
    files.pop("server_log", None)
    from .h3 import private_file
    private_file(os.path.join(out, "keys.log")).close()  # 0600 before secrets go in
    with EmulatedPath(pspec, out) as path:
        _tune(path, s)
        server_cmd = [sys.executable, "-m", "tracekit.lab.h3", "server", "--addr", "0.0.0.0",
                      "--port", str(H3_PORT), "--qlog-dir", qlogs["server"],
                      "--processing-ms", str(PROCESSING_MS)]
        with running(path.server, server_cmd, "HTTP/3 server"):
            base = [sys.executable, "-m", "tracekit.lab.h3", "client", "--addr", SERVER_ADDR,
                    "--port", str(H3_PORT), "--qlog-dir", qlogs["client"], "--bytes", str(down),
                    "--run", run_id]
            n = int(spec["requests"])  # (no warmup: an h3 run is measured from its first request)
            with _recording(path, files, out, 1600):
                if s["connection"] == "fresh":
                    for i in range(n):
                        subprocess.run(path.client(base + [
                            "--events", files["client_log"], "--keylog", os.path.join(out, "keys.log"),
                            "--requests", "1", "--first", str(i)]), check=True, timeout=120)
                else:
                    subprocess.run(path.client(base + [
                        "--events", files["client_log"], "--keylog", os.path.join(out, "keys.log"),
                        "--requests", str(n)]), check=True, timeout=300)
            time.sleep(1.0)  # the server writes its qlog when a connection has drained
    manifest = _manifest(spec, s, trial, order, combo, pspec, None, files, path, started, run_id,
                         {"name": "tts", "protocol": "h3", "upload_bytes": 0,
                          "response_bytes": down, "processing_ms": PROCESSING_MS,
                          "requests": spec["requests"]})
    import glob
    manifest["files"]["qlogs"] = [os.path.relpath(q, out) for d in qlogs.values()
                                  for q in sorted(glob.glob(os.path.join(d, "*.qlog")))]
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def _run_streaming(spec, s, trial, order, combo, out, files, pspec, run_id, started):
    """One run of the streaming speech workload (tracekit.lab.streaming): one
    stream per request, each on a new connection, direct or through the
    tunnel; `chunks` (per stream) and `initial_buffer_ms` are settings (and
    may be factors)."""
    from .streaming import CHUNK_BYTES, CHUNK_MS, SAMPLE_RATE
    from .tunnel import Tunnel, TunnelSettings

    n = int(spec["requests"])
    chunks = int(s.get("chunks", spec.get("chunks", 100)))
    buffer_ms = float(s.get("initial_buffer_ms", 60))
    tunnel_settings = (TunnelSettings(target_port=STREAM_PORT, **_tunnel_sizing(s))
                       if is_tunnel(s) else None)
    with EmulatedPath(pspec, out) as path:
        _tune(path, s)
        server_cmd = [sys.executable, "-m", "tracekit.lab.streaming", "server", "--addr", "0.0.0.0",
                      "--port", str(STREAM_PORT), "--log", files["server_log"],
                      "--connections", str(n)]
        with running(path.server, server_cmd, "streaming server") as server:

            def streams(addr, port):
                for i in range(n):
                    subprocess.run(path.client([
                        sys.executable, "-m", "tracekit.lab.streaming", "client", "--addr", addr,
                        "--port", str(port), "--log", files["client_log"], "--chunks", str(chunks),
                        "--initial-buffer-ms", str(buffer_ms), "--request", f"{run_id}-s{i}",
                        "--run", run_id]), check=True, timeout=600)
            if tunnel_settings:
                with Tunnel(path, tunnel_settings) as tunnel:
                    with _recording(path, files, out, SNAPLEN, tunnel=True):
                        streams(tunnel.addr, tunnel.port)
            else:
                with _recording(path, files, out, SNAPLEN):
                    streams(SERVER_ADDR, STREAM_PORT)
            server.wait(timeout=30)
    manifest = _manifest(spec, s, trial, order, combo, pspec, tunnel_settings, files, path,
                         started, run_id,
                         {"name": "streaming", "streams": n, "chunks": chunks,
                          "chunk_ms": CHUNK_MS, "chunk_bytes": CHUNK_BYTES,
                          "sample_rate": SAMPLE_RATE, "initial_buffer_ms": buffer_ms})
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest


@contextlib.contextmanager
def _recording(path, files, out, snaplen, tunnel=False):
    """Client- and server-side captures for the block; through a tunnel also the
    client's loopback, where the application's connection is."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(tcpdump(path.client, files["client_capture"], snaplen=snaplen))
        stack.enter_context(tcpdump(path.server, files["server_capture"], snaplen=snaplen))
        if tunnel:
            files["loopback_capture"] = os.path.join(out, "client-loopback.pcap")
            stack.enter_context(tcpdump(path.client, files["loopback_capture"], snaplen=snaplen,
                                        device="lo"))
        yield


def _manifest(spec, s, trial, order, combo, pspec, tunnel_settings, files, path, started, run_id,
              workload):
    return lab_manifest(
        run=run_id, experiment=spec["name"], trial=trial, order=order, factors=combo,
        fixed=spec.get("fixed", {}), settings=s, path=asdict(pspec),
        tunnel=tunnel_settings.as_dict() if tunnel_settings else None, workload=workload,
        forwarder=path.stats, files={k: os.path.basename(v) for k, v in files.items()},
        started=started, seconds=round(time.time() - started, 3))


def disturbed(manifests, limit_ms=5.0):
    """The runs during which the forwarder ran late, or the disturbance probe saw
    the machine away, by more than `limit_ms` at a time."""
    out = []
    for m in manifests:
        f = m.get("forwarder") or {}
        if max(f.get("max_late_ms", 0), (f.get("machine") or {}).get("max_late_ms", 0)) > limit_ms:
            out.append(m["run"])
    return out


def run_folder(out):
    """A run's folder, made anew 0700 (as root, never through a symlink: a
    planted link would have the run written, and chmod-ed, outside --out)."""
    if os.path.islink(out):
        raise TracekitError(f"{out}: a symbolic link where a run's folder goes; "
                            f"remove it (runs are written only inside --out)")
    try:
        os.mkdir(out, 0o700)
    except FileExistsError:
        if not os.path.isdir(out) or os.path.islink(out):
            raise TracekitError(f"{out}: not a folder; remove it and run again") from None
    os.chmod(out, 0o700, follow_symlinks=False)


def own_manifest(workdir, run_id):
    """A finished run's manifest.json, trusted by --resume only when it is its own:
    the run it names, and every file relative, inside its folder (no absolute
    path, no `..`, no symlink out of it)."""
    folder = os.path.join(workdir, run_id)
    path = os.path.join(folder, "manifest.json")
    try:
        if os.path.islink(folder) or os.path.islink(path):
            raise ValueError("a symbolic link")
        with open(path) as f:
            m = json.load(f)
        if not isinstance(m, dict) or m.get("run") != run_id:
            raise ValueError(f"it names run {m.get('run') if isinstance(m, dict) else None!r}")
        real = os.path.realpath(folder)
        for value in m.get("files", {}).values():
            for name in value if isinstance(value, list) else [value]:
                if not isinstance(name, str) or os.path.isabs(name) or ".." in name.split("/"):
                    raise ValueError(f"it names {name!r}")
                if os.path.commonpath([real, os.path.realpath(os.path.join(folder, name))]) != real:
                    raise ValueError(f"{name!r} leads out of the run's folder")
    except (OSError, ValueError) as e:
        raise TracekitError(f"{path}: not this run's own manifest ({e}); --resume takes only "
                            f"a run's own files inside --out (remove the folder to run it "
                            f"again)") from None
    return m


def run_experiment(spec, workdir, progress=None, resume=False):
    """Run every scheduled run; return their manifests. With `resume`, a run
    whose manifest.json exists (it finished) is kept, not run again."""
    netns.require_root()
    manifests = []
    plan = schedule(spec)
    for i, (trial, order, combo) in enumerate(plan, 1):
        run_id = f"{spec['name']}-{order:03d}"
        done = os.path.join(workdir, run_id, "manifest.json")
        if resume and os.path.exists(done):
            manifests.append(own_manifest(workdir, run_id))
            if progress:
                progress(i, len(plan), combo, skipped=True)
            continue
        if progress:
            progress(i, len(plan), combo)
        manifests.append(run_one(spec, trial, order, combo, workdir))
    with open(os.path.join(workdir, f"{spec['name']}.runs.json"), "w") as f:
        json.dump(manifests, f, indent=2)
    return manifests
