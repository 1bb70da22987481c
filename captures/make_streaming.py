"""Recreate the streaming-stalls-* samples (the recipe is the provenance).

tracekit's streaming workload (tracekit/lab/streaming.py) over the emulated
WAN (10 ms each way): three streams one after the other, each 100 chunks of
20 ms 24 kHz PCM with a 60 ms initial buffer, each stalled on purpose at
chunk 40: the path drops that chunk's segment three times in the first
connection (stream `transport`), the server's model pauses 300 ms (stream
`model`), the client's reader sleeps 300 ms (stream `local`). Writes the
client-side capture, both event logs and the emulator's drop log. Needs
root and tcpdump.

    sudo .venv/bin/python captures/make_streaming.py
"""

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tracekit.lab import streaming  # noqa: E402
from tracekit.lab.wan import Direction, EmulatedPath, PathSpec  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FRAME = streaming.HEADER.size + streaming.CHUNK_BYTES


def main():
    down = Direction(delay_ms=10, drop_segments=((1 + 40 * FRAME, 3, 0),))
    streams = [{"request": "transport", "chunks": 100},
               {"request": "model", "chunks": 100, "pause": (40, 300)},
               {"request": "local", "chunks": 100, "throttle": (40, 300)}]
    with tempfile.TemporaryDirectory() as work:
        with EmulatedPath(PathSpec(up=Direction(delay_ms=10), down=down, seed=3), work) as path:
            files = streaming.record(path, work, streams, initial_buffer_ms=60, run="stalls")
        for key, name in (("capture", "streaming-stalls-client.pcap"),
                          ("client_log", "streaming-stalls-client-events.jsonl"),
                          ("server_log", "streaming-stalls-server-events.jsonl")):
            shutil.copy(files[key], os.path.join(HERE, name))
        shutil.copy(os.path.join(work, "drops.jsonl"), os.path.join(HERE, "streaming-stalls-drops.jsonl"))
    print("wrote the streaming-stalls-* files")


if __name__ == "__main__":
    main()
