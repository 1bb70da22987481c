"""The CLI's views of analyses/views/*.sql, declared once: name, what it
filters by, what it shows, an example. `tracekit <name>` and
`tracekit.open(...).view(name)` are made from this list."""

from typing import NamedTuple


class View(NamedTuple):
    name: str
    scope: str  # "transport": --capture/--flow; "application": --run
    doc: str
    example: str

    def defaults(self):
        """The view's parameters, unfiltered."""
        return ({"capture_id": None, "flow_id": None} if self.scope == "transport"
                else {"run": None})


VIEWS = (
    View("handshakes", "transport",
         "TCP, TLS and QUIC connection setups: duration, first data, round trips.",
         "tracekit handshakes --capture 1 --format markdown"),
    View("rtt", "transport",
         "RTT per flow and direction (min/median/p90/max) and the capture's vantage point.",
         "tracekit rtt --capture 3"),
    View("retransmissions", "transport",
         "Retransmissions per flow direction by trigger, beside Wireshark's calls.",
         "tracekit retransmissions --capture 3 --flow 0"),
    View("rounds", "transport",
         "Loss-recovery rounds: segments, triggers and what each round cost.",
         "tracekit rounds --capture 3 --format csv"),
    View("stalls", "transport",
         "Share of each flow direction's life in each limitation state.",
         "tracekit stalls --capture 3"),
    View("acks", "transport",
         "ACK behaviour per flow direction: frequency, delayed, stretch, duplicate, SACK.",
         "tracekit acks --capture 2"),
    View("requests", "transport",
         "Requests: from request_start/end events, else each request/response exchange of a "
         "TCP flow.", "tracekit requests --capture 1 --format json"),
    View("playback", "application",
         "Audio streams: underruns, silence, jitter or rate deficit, buffer needed.",
         "tracekit playback --run stalls"),
    View("underruns", "application",
         "Playback underruns, each charged to model, transport or local.",
         "tracekit underruns --run stalls --format markdown"),
    View("attribute", "application",
         "Per request: measured time, serial bound, gap and the spans that took it.",
         "tracekit attribute --run cross-region-001"),
    View("serving", "application",
         "Model serving per batch size: throughput, TTFT, TPOT, slot waste, slowdown.",
         "tracekit serving --format csv"),
    # agent tasks (issue #28)
    View("tasks", "application",
         "Agent tasks: rounds, setup, reconnects, deadline slack, lost rounds, duplicate actions.",
         "tracekit tasks --run agent-002"),
    View("agent-rounds", "application",
         "Agent rounds: edge work, upload, model, network, action and unexplained, adding up to "
         "each round; the flow that carried it.", "tracekit agent-rounds --format csv"),
    # streams sharing a connection (issue #27)
    View("streams", "application",
         "Streams of a connection: sent, complete, deliverable, head-of-line time, queueing, "
         "on-time media.", "tracekit streams --format markdown"),
)
BY_NAME = {v.name: v for v in VIEWS}
