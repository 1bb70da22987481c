"""Network namespaces and TUN devices, through iproute2 and two system calls."""

import ctypes
import fcntl
import functools
import os
import struct
import subprocess

from ..core.errors import TracekitError

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
PREFIX = "tk-"  # every namespace the lab makes starts with this
REGISTRY = os.environ.get("TRACEKIT_LAB_REGISTRY", "/run/tracekit-lab")  # a record per path

libc = ctypes.CDLL(None, use_errno=True)


def require_root():
    if os.geteuid() != 0:
        raise TracekitError("the lab needs root (CAP_NET_ADMIN) to create network namespaces "
                            "and TUN devices; run it as root")


def run(*cmd):
    """Run an iproute2 command; failures become TracekitError with its stderr."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise TracekitError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return r.stdout


def in_ns(ns, *cmd):
    return ["ip", "netns", "exec", ns, *cmd]


# The programs a lab run measures (servers, clients, tcpdump, the tunnel) run
# round-robin real-time, below the path's forwarder (FIFO 10): the machine's
# ordinary work (a build, a test suite, another tenant's job) then cannot
# delay a reply or an ACK and change what the run measures. Linux keeps 5 % of
# each second for ordinary processes (sched_rt_runtime_us), so a lab program
# that spins cannot lock the machine up.
ENDPOINT_PRIORITY = 5


@functools.cache
def realtime_prefix():
    """["chrt", "-r", "5"] where real-time scheduling is allowed, else [] (asked once)."""
    prefix = ["chrt", "-r", str(ENDPOINT_PRIORITY)]
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True).returncode == 0
    except OSError:  # no chrt (util-linux)
        ok = False
    return prefix if ok else []


def in_ns_realtime(ns, *cmd):
    return in_ns(ns, *realtime_prefix(), *cmd)


def add(ns):
    run("ip", "netns", "add", ns)
    run(*in_ns(ns, "ip", "link", "set", "lo", "up"))
    # the lab's paths are IPv4: no router solicitations or MLD reports of a
    # device's own, which would cross the path (or meet a peer not yet up)
    run(*in_ns(ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
               "net.ipv6.conf.default.disable_ipv6=1"))


def delete(ns):
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def stop(proc, grace_s=10):
    """End a process we started: SIGTERM, then SIGKILL if it is still there
    after `grace_s` seconds. A process that already ended is left alone."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def leftovers():
    """Namespaces named like the lab's that exist (made by it or not)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


# The registry: what each emulated path made (namespaces, the forwarder's PID) and
# which process owns it, written before anything is made, removed after cleanup.
# `tracekit lab clean` removes only what a record names, and not while its owner lives.

def record_path(tag):
    return os.path.join(REGISTRY, f"{tag}.json")


def write_record(tag, record):
    import json
    os.makedirs(REGISTRY, mode=0o700, exist_ok=True)
    tmp = record_path(tag) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, record_path(tag))


def remove_record(tag):
    try:
        os.remove(record_path(tag))
    except FileNotFoundError:
        pass


def records():
    """[(tag, record)] of every path the registry lists."""
    import json
    out = []
    try:
        names = sorted(os.listdir(REGISTRY))
    except FileNotFoundError:
        return out
    for name in names:
        if name.endswith(".json"):
            try:
                with open(os.path.join(REGISTRY, name)) as f:
                    out.append((name[:-5], json.load(f)))
            except (OSError, ValueError):
                continue
    return out


def alive(pid, started):
    """Whether process `pid` is still the one that started at `started` (its start
    time in clock ticks since boot, /proc/PID/stat field 22): a PID reused by
    another program is not alive for us."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[19]) == started
    except (OSError, IndexError, ValueError):
        return False


def start_time(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def open_tun_in(ns, name):
    """Create TUN device `name` inside namespace `ns`; return its fd.

    The calling thread enters the namespace only for the ioctl and comes back;
    the device lives as long as the fd stays open.
    """
    here = os.open("/proc/self/ns/net", os.O_RDONLY)
    there = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(there, CLONE_NEWNET) != 0:
            raise TracekitError(f"cannot enter namespace {ns}: {os.strerror(ctypes.get_errno())}")
        try:
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
            fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
        finally:
            libc.setns(here, CLONE_NEWNET)
    finally:
        os.close(here)
        os.close(there)
    return fd
