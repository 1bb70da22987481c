"""What the ingest and dataset fault campaigns feed tracekit: a store made
of BASE, then MORE ingested (or analysed) with the fault."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACEKIT = [sys.executable, "-m", "tracekit.cli"]
BASE = [ROOT / "captures" / "streaming-stalls-client.pcap",
        ROOT / "captures" / "streaming-stalls-client-events.jsonl"]
MORE = [ROOT / "captures" / "http-fresh-vs-persistent.pcap",
        ROOT / "captures" / "streaming-stalls-server-events.jsonl"]
