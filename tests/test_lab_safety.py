"""The lab runs as root: what it writes stays where it was told, secrets stay private."""

import os
import stat

import pytest

from tracekit.core.errors import TracekitError
from tracekit.lab.experiment import load
from tracekit.lab.h3 import _certificate, private_file

SPEC = '[factors]\nconnection = ["fresh", "persistent"]\n'


@pytest.mark.parametrize("name", ["../x", "/etc/cron.d/x", "a/b", "..", ".hidden", "", "x" * 65,
                                  "a..b"])
def test_experiment_names_are_one_file_name(tmp_path, name):
    p = tmp_path / "e.toml"
    p.write_text(f"name = {name!r}\n".replace("'", '"') + SPEC)
    with pytest.raises(TracekitError, match="must be one file name"):
        load(p)


def test_a_plain_name_and_the_file_stem_are_fine(tmp_path):
    p = tmp_path / "chapter-case.toml"
    p.write_text(SPEC)
    assert load(p)["name"] == "chapter-case"
    p.write_text('name = "tts_v2.1"\n' + SPEC)
    assert load(p)["name"] == "tts_v2.1"


def test_keys_are_0600_in_a_0700_folder(tmp_path):
    old = os.umask(0o022)
    try:
        run = tmp_path / "run-001"
        run.mkdir(mode=0o755)
        cert, key = _certificate(str(run))
        log = run / "keys.log"
        log.write_text("stale")
        os.chmod(log, 0o644)
        private_file(str(log)).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600 and log.read_text() == ""
    assert stat.S_IMODE(os.stat(run).st_mode) == 0o700


HOLD_PATH = """
import sys, time
from tracekit.lab.wan import Direction, EmulatedPath, PathSpec
with EmulatedPath(PathSpec(up=Direction(5), down=Direction(5)), sys.argv[1]) as p:
    print(p.client_ns, p.server_ns, p.forwarder.pid, flush=True)
    time.sleep(600)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root")
def test_clean_removes_a_killed_runs_paths_and_leaves_a_live_one(tmp_path):
    import signal
    import subprocess
    import sys

    from click.testing import CliRunner

    from tracekit.cli import main
    from tracekit.lab import netns

    def hold():
        proc = subprocess.Popen([sys.executable, "-c", HOLD_PATH, str(tmp_path)],
                                stdout=subprocess.PIPE, text=True)
        client, server, forwarder = proc.stdout.readline().split()
        return proc, [client, server], int(forwarder)

    live, live_ns, live_fwd = hold()
    dead, dead_ns, dead_fwd = hold()
    try:
        dead.send_signal(signal.SIGKILL)  # no cleanup ran: namespaces, forwarder, record left
        dead.wait()
        assert set(dead_ns) <= set(netns.leftovers()) and os.path.exists(f"/proc/{dead_fwd}")
        r = CliRunner().invoke(main, ["lab", "clean"])
        assert r.exit_code == 0, r.output
        assert f"removed {', '.join(dead_ns)} (1 processes, the forwarder included)" in r.output
        assert not set(dead_ns) & set(netns.leftovers())
        assert not os.path.exists(f"/proc/{dead_fwd}") or "zombie" in open(f"/proc/{dead_fwd}/status").read().lower()
        assert f"left {', '.join(live_ns)}: a lab run is still using them (PID {live.pid}" in r.output
        assert set(live_ns) <= set(netns.leftovers()) and live.poll() is None
        r = CliRunner().invoke(main, ["lab", "clean", "--force"])
        assert f"forced: removing the paths of a live lab run (PID {live.pid}" in r.output
        assert not set(live_ns) & set(netns.leftovers())
    finally:
        live.kill()
        live.wait()
        live.stdout.close()
        dead.stdout.close()
        for ns in live_ns + dead_ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
