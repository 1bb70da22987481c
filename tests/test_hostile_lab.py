"""The lab runs as root: nothing it writes or removes may be steered by what
someone planted in --out or in its registry (a symlinked run folder or key
log, a manifest naming files outside its run, a record naming a foreign
namespace)."""

import json
import os
import subprocess

import pytest

from tracekit.core.errors import TracekitError
from tracekit.lab import cleanup, netns
from tracekit.lab.experiment import own_manifest, run_folder
from tracekit.lab.h3 import private_file


def test_a_planted_key_log_symlink_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "keys.log").symlink_to(victim)
    with pytest.raises(TracekitError, match="never written through a symbolic link"):
        private_file(str(run / "keys.log"))
    assert victim.read_text() == "precious\n"  # (before: truncated, then filled with secrets)


def test_a_symlinked_run_folder_is_refused_and_a_new_one_is_0700(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    out = tmp_path / "out"
    out.mkdir()
    (out / "exp-001").symlink_to(elsewhere)
    with pytest.raises(TracekitError, match="a symbolic link where a run's folder goes"):
        run_folder(str(out / "exp-001"))
    assert oct(elsewhere.stat().st_mode & 0o777) == "0o755"  # (before: chmod-ed 0700, written)
    run_folder(str(out / "exp-002"))
    assert oct((out / "exp-002").stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("files, says", [
    ({"client_capture": "/etc/shadow"}, "it names '/etc/shadow'"),
    ({"client_capture": "../other/client.pcap"}, "it names '../other/client.pcap'"),
    ({"qlogs": ["q/../../x.qlog"]}, "it names 'q/../../x.qlog'"),
    ({"client_capture": "link.pcap"}, "'link.pcap' leads out of the run's folder"),
])
def test_resume_takes_only_a_runs_own_manifest(tmp_path, files, says):
    run = tmp_path / "exp-001"
    run.mkdir()
    (run / "link.pcap").symlink_to("/etc/hostname")
    (run / "manifest.json").write_text(json.dumps({"run": "exp-001", "files": files}))
    with pytest.raises(TracekitError, match="not this run's own manifest") as e:
        own_manifest(str(tmp_path), "exp-001")
    assert says in str(e.value)
    good = {"run": "exp-001", "files": {"client_capture": "client.pcap", "qlogs": ["q/a.qlog"]}}
    (run / "manifest.json").write_text(json.dumps(good))
    assert own_manifest(str(tmp_path), "exp-001") == good
    (run / "manifest.json").write_text(json.dumps({**good, "run": "exp-002"}))
    with pytest.raises(TracekitError, match="it names run 'exp-002'"):
        own_manifest(str(tmp_path), "exp-001")


@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")
def test_lab_clean_touches_nothing_a_record_names_but_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(netns, "REGISTRY", str(tmp_path / "registry"))
    foreign = "tkharden-foreign"  # another program's namespace
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    try:
        netns.write_record("999999-1", {"namespaces": [foreign, "tk-c999999-1"],
                                        "owner_pid": 999999999, "owner_start": 1,
                                        "forwarder_pid": None})
        lines = cleanup.clean()
        assert any("names 'tkharden-foreign', not the namespaces the lab makes" in ln
                   for ln in lines), lines
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert foreign in out.split()  # (before: deleted)
    finally:
        subprocess.run(["ip", "netns", "del", foreign], capture_output=True)
