"""The `agent-tasks` workload of `tracekit lab run`: the agent loop
(tracekit.lab.agent) over the emulated WAN, so that a tier is a path (rtt_ms,
rate_mbps, loss) and a model time. Settings (each may be a factor or come
with a level): rounds (10), tasks (the experiment's `requests`),
upload_bytes (100,000), edge_ms (20), action_ms (2), model_ms (30),
deadline_s, disconnect_after, reconnect_s (0.5), commit (1: the server
keeps commits; 0: it does not), retry ("query" or "reexecute"), otlp (1:
the client also writes an OpenTelemetry trace).
"""

import json
import os

from .agentpath import run_loop
from .wan import SERVER_ADDR, EmulatedPath


def run_agent_tasks(spec, s, trial, order, combo, out, files, pspec, run_id, started):
    from .experiment import _manifest, _recording, _tune

    cfg = {"rounds": int(s.get("rounds", 10)), "tasks": int(s.get("tasks", spec["requests"])),
           "upload_bytes": int(s.get("upload_bytes", 100_000)),
           "edge_s": float(s.get("edge_ms", 20)) / 1e3, "action_s": float(s.get("action_ms", 2)) / 1e3,
           "model_s": float(s.get("model_ms", 30)) / 1e3, "task_prefix": f"{run_id}-t",
           "reconnect_s": float(s.get("reconnect_s", 0.5)), "retry": s.get("retry", "query"),
           "otlp": bool(int(s.get("otlp", 0)))}
    for key in ("deadline_s", "disconnect_after"):
        if key in s:
            cfg[key] = s[key]
    workload = {"name": "agent-tasks", **{k: v for k, v in cfg.items() if k != "otlp"},
                "commit": bool(int(s.get("commit", 1)))}
    logs = {"server": files["server_log"], "client": files["client_log"]}
    with EmulatedPath(pspec, out) as path:
        _tune(path, s)
        written = run_loop({"server": path.server, "client": path.client}, SERVER_ADDR, out,
                           logs, _recording(path, files, out, 96), run_id, workload["commit"],
                           **cfg)
    if "otlp" in written:
        files["otlp_trace"] = written["otlp"]  # not ingested with the logs: the same events
    manifest = _manifest(spec, s, trial, order, combo, pspec, None, files, path, started, run_id,
                         workload)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest
