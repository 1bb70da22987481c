"""`tracekit lab clean`: remove what a lab run that died left behind, and only that.

Every emulated path writes a record (lab/netns.py's registry) before it makes
anything: its two namespaces, its forwarder's PID and start time, and the PID
and start time of the process that owns it. A record whose owner is still
running is a live run: left alone unless forced, and then named. Otherwise the
processes inside its namespaces are ended (SIGTERM, then SIGKILL), the
forwarder too -- if that PID is still the forwarder that was started (a PID
reused by another program is not touched) -- and the namespaces deleted.
Namespaces named like the lab's but in no record are listed, never touched.
"""

import os
import re
import signal
import subprocess
import time

from . import netns


def _pids_in(ns):
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def _end(pids, grace_s=3.0):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.05)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


TAG = re.compile(r"[0-9]{1,10}-[0-9]{1,10}")  # the lab's record tags: PID-count


def _not_the_labs(tag, names):
    """What a record names beyond the two namespaces the lab makes for its tag."""
    if not TAG.fullmatch(tag) or not isinstance(names, list):
        return [tag] if not TAG.fullmatch(tag) else [names]
    own = {f"{netns.PREFIX}c{tag}", f"{netns.PREFIX}s{tag}"}
    return [n for n in names if n not in own]


def clean(force=False):
    """Lines saying what was removed and what was left, and why."""
    netns.require_root()
    lines, recorded = [], set()
    for tag, rec in netns.records():
        names = rec.get("namespaces", [])
        unchecked = _not_the_labs(tag, names)
        if unchecked:  # a record naming anything but its own two: touch nothing of it
            lines.append(f"not touched: the record {netns.record_path(tag)} names "
                         f"{', '.join(map(repr, unchecked))}, not the namespaces the lab "
                         f"makes for it")
            continue
        recorded.update(names)
        owner = rec.get("owner_pid")
        if netns.alive(owner, rec.get("owner_start")):
            who = f"PID {owner}, uid {rec.get('uid')}, started {time.ctime(rec.get('started', 0))}"
            if not force:
                lines.append(f"left {', '.join(names)}: a lab run is still using them ({who}); "
                             f"--force removes them")
                continue
            lines.append(f"forced: removing the paths of a live lab run ({who})")
        pids = [p for ns in names for p in _pids_in(ns)]
        fwd = rec.get("forwarder_pid")
        if fwd and netns.alive(fwd, rec.get("forwarder_start")):
            pids.append(fwd)
        _end(pids)
        for ns in names:
            netns.delete(ns)
        netns.remove_record(tag)
        lines.append(f"removed {', '.join(names)} ({len(pids)} processes"
                     f"{', the forwarder included' if fwd in pids else ''})")
    strangers = [ns for ns in netns.leftovers() if ns not in recorded]
    if strangers:
        lines.append(f"not touched: {', '.join(strangers)} (named like the lab's, but no "
                     f"record says tracekit made them)")
    return lines or ["nothing to clean"]
