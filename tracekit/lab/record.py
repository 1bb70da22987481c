"""Recording a lab run: tcpdump inside a namespace for the length of a block,
and the servers a run talks to, up for the length of a block."""

import contextlib
import re
import signal
import subprocess
import time

from ..core.errors import TracekitError
from .netns import stop


@contextlib.contextmanager
def tcpdump(run_in, out, snaplen=128, device="tk0", immediate=True):
    """tcpdump on the namespace's device into `out` while the block runs.

    `run_in(cmd)` wraps a command to run in the namespace (EmulatedPath.client
    or .server). Timestamps are in nanoseconds; headers only by default,
    whole packets with snaplen 0 or None. If tcpdump reports packets dropped
    by the kernel, the capture is incomplete and this raises.

    In immediate mode libpcap's ring has one snaplen-sized slot per packet,
    so "whole packets" means the path's MTU plus headroom (1600 bytes), not
    tcpdump's default 262144, with which a 2 MiB ring holds 8 packets and a
    burst is lost; the ring is also made 32 MiB.

    Immediate mode wakes tcpdump for every packet. At hundreds of Mbit/s
    those wake-ups cost more CPU than the path's forwarding (a 333 Mbit/s
    download: about twice the CPU time of the run without them), so
    `immediate=False` lets the kernel hand tcpdump filled blocks of its ring
    instead; the last block is handed over at the latest 1 s after it was
    opened (tcpdump's buffer timeout), so the block waits that long before
    stopping it. Timestamps are taken as each packet arrives either way.
    """
    cmd = ["tcpdump", "-i", device, "-n", *(["-U", "--immediate-mode"] if immediate else []),
           "-B", "32768", "--time-stamp-precision", "nano", "-w", out, "-s", str(snaplen or 1600)]
    dump = subprocess.Popen(run_in(cmd), stderr=subprocess.PIPE, text=True)
    try:
        # tcpdump says "listening on <device>" once its capture is open
        first = dump.stderr.readline()
        if "listening on" not in first:
            raise TracekitError(f"tcpdump did not start on {device}: {first.strip()}")
        yield out
        time.sleep(0.2 if immediate else 1.2)  # let it write the last packets before SIGINT
    finally:
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=30)
        rest = dump.stderr.read()
        dump.stderr.close()
    # tcpdump's closing statistics: a capture that lost packets must say so
    dropped = re.search(r"(\d+) packets? dropped by kernel", rest)
    if dropped and int(dropped.group(1)):
        raise TracekitError(f"tcpdump on {device} lost {dropped.group(1)} packets "
                            f"(dropped by kernel): {out} is incomplete")


@contextlib.contextmanager
def running(run_in, cmd, what):
    """A server in a namespace, up (it prints "up") for the block and stopped
    after it (a server that ended by itself is left alone)."""
    proc = subprocess.Popen(run_in(cmd), stdout=subprocess.PIPE, text=True)
    try:
        if proc.stdout.readline().strip() != "up":
            raise TracekitError(f"the {what} did not start")
        yield proc
    finally:
        stop(proc)
        proc.stdout.close()
