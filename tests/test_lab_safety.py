"""The lab runs as root: what it writes stays where it was told, secrets stay private."""

import os
import stat

import pytest

from tracekit.errors import TracekitError
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
