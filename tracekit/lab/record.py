"""Recording a lab run: tcpdump inside a namespace for the length of a block."""

import contextlib
import signal
import subprocess
import time

from ..errors import TracekitError


@contextlib.contextmanager
def tcpdump(run_in, out, snaplen=128, device="tk0"):
    """tcpdump on the namespace's device into `out` while the block runs.

    `run_in(cmd)` wraps a command to run in the namespace (EmulatedPath.client
    or .server). Timestamps are in nanoseconds; headers only by default.
    """
    cmd = ["tcpdump", "-i", device, "-n", "-U", "--immediate-mode",
           "--time-stamp-precision", "nano", "-w", out] + (["-s", str(snaplen)] if snaplen else [])
    dump = subprocess.Popen(run_in(cmd), stderr=subprocess.PIPE, text=True)
    try:
        # tcpdump says "listening on <device>" once its capture is open
        first = dump.stderr.readline()
        if "listening on" not in first:
            raise TracekitError(f"tcpdump did not start on {device}: {first.strip()}")
        yield out
        time.sleep(0.2)  # let it write the last packets before SIGINT
    finally:
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=30)
        dump.stderr.close()
