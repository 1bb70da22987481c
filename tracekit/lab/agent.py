"""A screenshot agent's loop over real kernel TCP: the client and the server.

    python -m tracekit.lab.agent serve PORT LOG MODEL_S COMMIT(0|1)
    python -m tracekit.lab.agent client CONFIG.json

Each round the client does its edge work (a screenshot: `edge_s`, during
which it sets the round's uplink rate on its tbf qdisc when a schedule is
given), uploads `upload_bytes` in one HTTP/1.1 POST, the server reads it
all, runs the model (`model_s` of sleep) and answers with a small action;
the client acts (`action_s`). The next round's request carries the commit
of the round before (`X-Commit`); a committing server keeps it. A
disconnect can be injected after round k's action and before its commit
reaches the server: the client closes the connection, waits `reconnect_s`,
connects again, asks the server which round it holds committed and does
the rest again, asking for the result of an action already executed
(`action_query`) or, with `retry = "reexecute"`, acting again.

Both sides write tracekit's agent vocabulary (docs/agents.md) as JSON
Lines; the client also exports OpenTelemetry spans (the SDK's OTLP JSON
file exporter) when `otlp` names a file and the SDK is installed.
"""

import http.client
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, nullcontext


class Log:
    """JSON Lines of agent events, written as they happen (one process's clock)."""

    def __init__(self, path, run):
        self.f = open(path, "w", buffering=1)
        self.run = run
        self.lock = threading.Lock()

    def __call__(self, kind, task, rnd=None, **fields):
        record = {"ts_ns": time.time_ns(), "kind": kind, "run": self.run, "task": task}
        if rnd is not None:
            record["round"] = rnd
        record.update(fields)
        with self.lock:
            self.f.write(json.dumps(record) + "\n")

    def close(self):
        self.f.close()


def serve(port, log_path, model_s, committing, run):
    log = Log(log_path, run)
    commits = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # the reply's headers and body are two writes: with Nagle on, the body
        # waits for the client's delayed ACK (40 ms a round, measured)
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def _reply(self, obj):
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # /state?task=T: the round the server holds committed
            task = self.path.split("task=", 1)[-1]
            self._reply({"committed": commits.get(task, 0) if committing else 0})

        def do_POST(self):  # /round?task=T&round=N: a screenshot
            query = dict(p.split("=", 1) for p in self.path.split("?", 1)[1].split("&"))
            task, rnd = query["task"], int(query["round"])
            done = int(self.headers.get("X-Commit", "0"))
            left = int(self.headers["Content-Length"])
            while left:
                left -= len(self.rfile.read(min(left, 1 << 16)))
            log("upload_end", task, rnd)
            if committing and done > commits.get(task, 0):
                commits[task] = done
                log("commit", task, done)
            # the client's request id: the attribution takes the model's time from these
            request = self.headers.get("X-Request")
            log("model_start", task, rnd, request=request)
            time.sleep(model_s)
            log("model_end", task, rnd, request=request)
            self._reply({"action_id": f"{task}-{rnd}", "action": "click"})

    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    print("ready", server.server_address[1], flush=True)  # port 0: the one given
    try:
        server.serve_forever()
    finally:
        log.close()


class Tracing:
    """OpenTelemetry spans of the loop (the SDK's OTLP JSON file exporter), or nothing."""

    def __init__(self, path):
        self.provider = self.tracer = None
        if not path:
            return
        from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        self.provider = TracerProvider()
        self.provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(path)))
        self.tracer = self.provider.get_tracer("tracekit.lab.agent")
        # the SDK's first span costs about 1.5 ms of set-up (measured) that the
        # first task's span would hold and its log would not: spent here, in a
        # span that means nothing to the reader
        with self.tracer.start_as_current_span("warm-up"):
            pass

    def span(self, name, client=False, **attributes):
        if self.tracer is None:
            return nullcontext(None)
        from opentelemetry.trace import SpanKind
        return self.tracer.start_as_current_span(
            name, kind=SpanKind.CLIENT if client else SpanKind.INTERNAL, attributes=attributes)

    def close(self):
        if self.provider is not None:
            self.provider.shutdown()


def _until(t_end):
    while time.perf_counter() < t_end:
        time.sleep(min(0.001, max(0.0, t_end - time.perf_counter())))


def _set_rate(cfg, bps, current):
    if not cfg.get("device") or bps == current:
        return current
    subprocess.run(["tc", "qdisc", "change", "dev", cfg["device"], "root", "tbf", "rate",
                    f"{int(bps)}bit", "burst", str(cfg.get("burst", 4096)), "limit",
                    str(cfg.get("limit", 4 << 20))], check=True)
    return bps


class Agent:
    """One client: tasks of rounds over one HTTP/1.1 connection per task."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.log = Log(cfg["log"], cfg.get("run"))
        self.trace = Tracing(cfg.get("otlp"))
        self.rate = None
        self.rates = iter(cfg.get("rates") or ())
        self.body = os.urandom(cfg["upload_bytes"])
        self.conn = None

    def connect(self):
        self.conn = http.client.HTTPConnection(self.cfg["server"], self.cfg["port"], timeout=60)
        self.conn.connect()

    def _event(self, span, kind, task, rnd=None, **fields):
        self.log(kind, task, rnd, **fields)
        if span is not None:
            span.add_event(kind, attributes={k: v for k, v in fields.items() if v is not None}
                           | ({"round": rnd} if rnd is not None else {}))

    @contextmanager
    def phase(self, stem, task, rnd, name, client=False, **attributes):
        with self.trace.span(name, client=client, **attributes) as span:
            self.log(f"{stem}_start", task, rnd, **self._extra(stem, attributes))
            try:
                yield span
            finally:
                self.log(f"{stem}_end", task, rnd, **self._extra(stem, attributes))

    @staticmethod
    def _extra(stem, attributes):
        if stem == "action":
            return {"action_id": attributes["gen_ai.tool.call.id"]}
        if stem == "request":
            return {"request": attributes["tracekit.request"],
                    "local_port": attributes["network.local.port"]}
        return {}

    def one_round(self, task, rnd, done, executed, retry):
        cfg = self.cfg
        with self.trace.span(f"round {rnd}", **{"tracekit.round": rnd}):
            self.log("round_start", task, rnd)
            self.began = time.perf_counter_ns()  # the client's own clock of the round
            with self.phase("edge", task, rnd, "screenshot", **{"tracekit.kind": "edge"}):
                t_end = time.perf_counter() + cfg["edge_s"]
                self.rate = _set_rate(cfg, next(self.rates, self.rate), self.rate)
                _until(t_end)
            port = self.conn.sock.getsockname()[1]
            request = f"{task}-{rnd}-{time.time_ns()}"
            self.log("upload_start", task, rnd)
            with self.phase("request", task, rnd, "chat agent-model", client=True,
                            **{"gen_ai.operation.name": "chat", "server.address": cfg["server"],
                               "server.port": cfg["port"], "network.local.port": port,
                               "tracekit.request": request}):
                self.conn.request("POST", f"/round?task={task}&round={rnd}", body=self.body,
                                  headers={"X-Commit": str(done), "X-Request": request})
                answer = json.loads(self.conn.getresponse().read())
            aid = answer["action_id"]
            if aid in executed and retry == "query":
                self.log("action_query", task, rnd, action_id=aid)
            else:
                with self.phase("action", task, rnd, "execute_tool click",
                                **{"gen_ai.operation.name": "execute_tool",
                                   "gen_ai.tool.name": "click", "gen_ai.tool.call.id": aid}):
                    _until(time.perf_counter() + cfg["action_s"])
                executed.add(aid)
            return aid

    def task(self, task):
        cfg = self.cfg
        with self.trace.span("invoke_agent screen-agent", **{
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "screen-agent",
                "tracekit.deadline_s": cfg.get("deadline_s", 0.0),
                "tracekit.run": cfg.get("run") or ""}) as span:
            self.log("task_start", task, deadline_s=cfg.get("deadline_s"))
            self.connect()
            executed, rnd, cut = set(), 1, cfg.get("disconnect_after")
            while rnd <= cfg["rounds"]:
                aid = self.one_round(task, rnd, rnd - 1, executed, cfg.get("retry", "query"))
                if rnd == cut:
                    cut = None
                    committed = self._reconnect(span, task, rnd)
                    for again in range(committed + 1, rnd + 1):
                        self._event(span, "retry", task, again, action_id=f"{task}-{again}")
                    rnd = committed + 1
                    continue
                self.log("round_end", task, rnd,
                         client_round_ns=time.perf_counter_ns() - self.began)
                rnd += 1
            self.conn.close()
            self.log("task_end", task)

    def _reconnect(self, span, task, rnd):
        self._event(span, "disconnect", task, rnd)
        self.conn.close()
        time.sleep(self.cfg["reconnect_s"])
        self.connect()
        self.conn.request("GET", f"/state?task={task}")
        committed = json.loads(self.conn.getresponse().read())["committed"]
        self._event(span, "reconnect", task, rnd, committed=committed)
        return committed

    def close(self):
        self.trace.close()
        self.log.close()


def client(cfg):
    agent = Agent(cfg)
    try:
        for k in range(cfg.get("tasks", 1)):
            agent.task(f"{cfg.get('task_prefix', 't')}{k + 1}")
    finally:
        agent.close()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5] == "1",
              sys.argv[6] if len(sys.argv) > 6 else None)
    else:
        with open(sys.argv[2]) as f:
            client(json.load(f))
