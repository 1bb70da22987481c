"""The agent workload's path: two network namespaces joined by a veth pair,
the client's uplink shaped by a tbf qdisc (rate changed per round by the
client when a schedule is given), and the run of one client against one
server on it (tracekit.lab.agent).

    with AgentPath(uplink_bps=8e6) as path:
        files = path.run(workdir, rounds=5, upload_bytes=100_000, ...)

Addresses 198.18.128.1 (client) and 198.18.128.2 (server). The namespaces
are registered like the emulated WAN's, so `tracekit lab clean` removes
what a crashed run left.
"""

import contextlib
import json
import os
import subprocess
import sys
import time

from . import netns, record

CLIENT_ADDR, SERVER_ADDR = "198.18.128.1", "198.18.128.2"
PORT = 8028
DEVICE = "tkag0"
BURST = 1600  # bytes: tbf's bucket, one full frame (a round's upload gets it free)
LIMIT = 4 << 20  # bytes queued in tbf: a whole upload, never a drop


class AgentPath:
    count = 0

    def __init__(self, uplink_bps):
        AgentPath.count += 1
        self.tag = f"ag{os.getpid()}-{AgentPath.count}"
        self.client_ns = f"{netns.PREFIX}c{self.tag}"
        self.server_ns = f"{netns.PREFIX}s{self.tag}"
        self.uplink_bps = uplink_bps

    def __enter__(self):
        netns.require_root()
        netns.write_record(self.tag, {
            "owner_pid": os.getpid(), "owner_start": netns.start_time(os.getpid()),
            "uid": os.getuid(), "namespaces": [self.client_ns, self.server_ns],
            "forwarder_pid": None, "forwarder_start": None, "started": time.time()})
        try:
            netns.add(self.client_ns)
            netns.add(self.server_ns)
            netns.run(*netns.in_ns(self.client_ns, "ip", "link", "add", DEVICE, "type", "veth",
                                   "peer", "name", DEVICE, "netns", self.server_ns))
            for ns, addr in ((self.client_ns, CLIENT_ADDR), (self.server_ns, SERVER_ADDR)):
                netns.run(*netns.in_ns(ns, "ip", "addr", "add", f"{addr}/30", "dev", DEVICE))
                netns.run(*netns.in_ns(ns, "ip", "link", "set", DEVICE, "up"))
            netns.run(*netns.in_ns(self.client_ns, "tc", "qdisc", "add", "dev", DEVICE, "root",
                                   "tbf", "rate", f"{int(self.uplink_bps)}bit", "burst",
                                   str(BURST), "limit", str(LIMIT)))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        netns.delete(self.client_ns)
        netns.delete(self.server_ns)
        netns.remove_record(self.tag)
        return False

    def run(self, workdir, run="agent", capture=False, committing=True, **cfg):
        """One client's tasks against a fresh server; returns the files written
        (server.jsonl, client.jsonl, client.pcap when `capture`, trace.otlp.jsonl
        when `otlp`). `cfg`: rounds, upload_bytes, edge_s, action_s, model_s,
        tasks, rates (bit/s per round, in order over all tasks),
        disconnect_after, reconnect_s, retry, deadline_s, otlp (bool)."""
        files = {"server": os.path.join(workdir, "server.jsonl"),
                 "client": os.path.join(workdir, "client.jsonl")}
        if capture:
            files["capture"] = os.path.join(workdir, "client.pcap")
        recording = (record.tcpdump(lambda cmd: netns.in_ns(self.client_ns, *cmd),
                                    files["capture"], device=DEVICE)
                     if capture else contextlib.nullcontext())
        wrap = {"server": lambda cmd: netns.in_ns_realtime(self.server_ns, *cmd),
                "client": lambda cmd: netns.in_ns_realtime(self.client_ns, *cmd)}
        cfg.update(device=DEVICE if cfg.get("rates") else None, burst=BURST, limit=LIMIT)
        return run_loop(wrap, SERVER_ADDR, workdir, files, recording, run, committing, **cfg)


def run_loop(wrap, server_addr, workdir, files, recording, run, committing, **cfg):
    """The agent server in wrap["server"], the client in wrap["client"] (each
    wraps a command to run in its namespace) inside the `recording` block."""
    os.makedirs(workdir, exist_ok=True)
    model_s = cfg.pop("model_s")
    server = subprocess.Popen(
        wrap["server"]([sys.executable, "-m", "tracekit.lab.agent", "serve", str(PORT),
                        files["server"], str(model_s), "1" if committing else "0", run]),
        stdout=subprocess.PIPE, text=True, env=_env())
    try:
        if not server.stdout.readline().startswith("ready"):
            raise netns.TracekitError("the agent server did not start")
        if cfg.pop("otlp", False):
            files["otlp"] = cfg["otlp"] = os.path.join(workdir, "trace.otlp.jsonl")
        config = {**cfg, "log": files["client"], "run": run, "server": server_addr, "port": PORT}
        path = os.path.join(workdir, "client.json")
        with open(path, "w") as f:
            json.dump(config, f)
        with recording:
            subprocess.run(wrap["client"]([sys.executable, "-m", "tracekit.lab.agent", "client",
                                           path]), check=True, env=_env(), timeout=3600)
    finally:
        netns.stop(server)
        server.stdout.close()
    return files


def _env():
    """The lab's processes import the same tracekit as this one."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH")) if p)}
