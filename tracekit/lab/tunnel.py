"""The Queqiao-shaped tunnel: a local endpoint on the client side holding one
persistent, multiplexed connection over the WAN to a gateway beside the
server, with forward error correction. kcptun (Debian package) is that:
kcptun-client listens on the client's loopback and carries every TCP
connection as a stream of one smux session over KCP/UDP to kcptun-server,
which opens the real TCP connection to the server on its side; Reed-Solomon
FEC (datashard + parityshard) repairs losses without a round trip.

    with Tunnel(path, settings) as tunnel:
        connect to (tunnel.addr, tunnel.port) from the client namespace

Settings (all recorded in the run's manifest): mode (kcptun's profile,
default fast3), datashard, parityshard, sndwnd, rcvwnd, the target port of
the server, and socks_port: when set, microsocks listens there on the
client's loopback and the client reaches the tunnel through a SOCKS5
CONNECT, as Queqiao presents itself to applications.

`sized_for(loss, rate_mbps, rtt_ms, fec)` chooses the FEC and the windows
from the path, as a deployment tuned for it would: parity shards enough
that a group of 10 data shards survives the loss with probability 0.999
(tracekit.model.fec_repair_symbols: 8 at 14 %, 3 at 3.6 %), or none (ARQ
only); windows (KCP's, in data segments; kcptun adds the parity below it)
that fill a bandwidth-delay product with data and parity, and room for the
expected retransmissions. kcptun has no pacer: what keeps it from
overrunning the bottleneck is that its window, so sized, stays within the
bandwidth-delay product plus the queue (one more product) -- `sized_for`
says so in `sizing`, or raises when it cannot.
"""

import math
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass

from ..core.errors import TracekitError
from ..core.model import fec_repair_symbols
from . import netns
from .wan import SERVER_ADDR

LOCAL_ADDR = "127.0.0.1"
SEGMENT = 1350  # kcptun's --mtu default: bytes of one KCP datagram
DATA_SHARDS = 10
GROUP_SURVIVAL = 0.999


@dataclass(frozen=True)
class TunnelSettings:
    target_port: int = 9200
    local_port: int = 9300
    kcp_port: int = 4000
    mode: str = "fast3"
    datashard: int = 10
    parityshard: int = 3
    sndwnd: int = 1024
    rcvwnd: int = 1024
    socks_port: int = 0  # > 0: a SOCKS5 proxy (microsocks) in front, as Queqiao presents one
    sizing: str = ""  # how the FEC and windows were chosen (sized_for), for the manifest

    def as_dict(self):
        return {"tool": "kcptun", **asdict(self)}


def sized_for(loss, rate_mbps, rtt_ms, fec=True, queue_bytes=None):
    """TunnelSettings fields (datashard, parityshard, sndwnd, rcvwnd, sizing)
    for a path with downstream `loss`, a bottleneck of `rate_mbps` and `rtt_ms`."""
    data = DATA_SHARDS if fec else 0
    parity = fec_repair_symbols(DATA_SHARDS, loss, GROUP_SURVIVAL) if fec else 0
    bdp = rate_mbps * 1e6 / 8 * rtt_ms / 1e3
    queue = bdp if queue_bytes is None else queue_bytes
    stretch = (data + parity) / data if data else 1.0
    # KCP's window counts data segments; kcptun adds the parity below it
    window = max(1024, math.ceil(bdp / (SEGMENT * stretch) / (1 - loss)))
    flight = window * SEGMENT * stretch
    if flight > bdp + queue:
        raise TracekitError(f"a kcptun window of {window} segments ({flight} bytes) would overrun "
                            f"the path's {bdp:.0f}-byte pipe and {queue}-byte queue")
    how = (f"FEC {data}+{parity} (a group survives {loss:.1%} loss with p>={GROUP_SURVIVAL})"
           if fec else "no FEC (ARQ only)")
    sizing = (f"{how}; window {window} segments of {SEGMENT} B, {flight / 1e6:.1f} MB on the "
              f"wire: a {bdp / 1e6:.1f} MB bandwidth-delay product of data"
              f"{' and parity' if fec else ''}, / {1 - loss:.2f} for retransmissions, within pipe + queue "
              f"({(bdp + queue) / 1e6:.1f} MB), so no pacer is needed")
    return {"datashard": data, "parityshard": parity, "sndwnd": window, "rcvwnd": window,
            "sizing": sizing}


class Tunnel:
    def __init__(self, path, settings=TunnelSettings(), log_dir=None):
        for tool in ("kcptun-client", "kcptun-server") + (("microsocks",) if settings.socks_port else ()):
            if not shutil.which(tool):
                raise TracekitError(f"{tool} is not installed (apt-get install kcptun)")
        self.path = path
        self.settings = settings
        self.log_dir = log_dir
        self.procs = []
        self.addr = LOCAL_ADDR
        self.port = settings.local_port

    def _common(self):
        s = self.settings
        return ["--key", "tracekit-lab", "--crypt", "none", "--mode", s.mode, "--nocomp",
                "--datashard", str(s.datashard), "--parityshard", str(s.parityshard),
                "--sndwnd", str(s.sndwnd), "--rcvwnd", str(s.rcvwnd), "--quiet"]

    def __enter__(self):
        s = self.settings
        try:
            self.procs.append(subprocess.Popen(
                self.path.server(["kcptun-server", "-l", f":{s.kcp_port}",
                                  "-t", f"127.0.0.1:{s.target_port}", *self._common()]),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self.procs.append(subprocess.Popen(
                self.path.client(["kcptun-client", "-l", f"{LOCAL_ADDR}:{s.local_port}",
                                  "-r", f"{SERVER_ADDR}:{s.kcp_port}", *self._common()]),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            if s.socks_port:
                self.procs.append(subprocess.Popen(
                    self.path.client(["microsocks", "-i", LOCAL_ADDR, "-p", str(s.socks_port)]),
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self._wait_listening()
            if s.socks_port:
                self._wait_listening(s.socks_port)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_listening(self, port=None):
        port = port or self.settings.local_port
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            out = subprocess.run(self.path.client(["ss", "-ltn"]), capture_output=True, text=True).stdout
            if f"{LOCAL_ADDR}:{port}" in out:
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.05)
        raise TracekitError(f"port {port} did not start listening in the client namespace")

    def __exit__(self, *exc):
        for p in self.procs:
            netns.stop(p, grace_s=5)
        self.procs = []
        return False
