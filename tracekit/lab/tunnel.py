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
"""

import shutil
import subprocess
import time
from dataclasses import asdict, dataclass

from ..errors import TracekitError
from . import netns
from .wan import SERVER_ADDR

LOCAL_ADDR = "127.0.0.1"


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

    def as_dict(self):
        return {"tool": "kcptun", **asdict(self)}


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
