"""Every example in `tracekit COMMAND --help` runs, as written, on the samples
(the store `make demo` builds), and names files and labels that exist."""

import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tracekit.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _commands(group=main, prefix=()):
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, prefix + (name,))
        else:
            yield prefix + (name,), cmd


def _examples(path):
    text = CliRunner().invoke(main, [*path, "--help"]).output
    assert "Example" in text, f"tracekit {' '.join(path)} --help has no example"
    lines = text.split("Example", 1)[1].splitlines()[1:]
    out = []
    for line in lines:
        if not line.startswith("  "):
            break
        out.append(line.strip())
    return out


COMMANDS = [p for p, _ in _commands()]


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p))
def test_every_command_has_an_example_naming_what_exists(path):
    for example in _examples(path):
        for word in shlex.split(example.replace("...", "")):
            if word.endswith((".pcap", ".pcapng", ".jsonl", ".toml", ".json", ".qlog")) \
                    and "*" not in word and not word.startswith(("runs", "keys")):
                assert (ROOT / word).exists(), f"{example}: {word} does not exist"


def _runnable(example):
    """The examples that read the store (not those that ingest, need root, pipe or
    name a store of their own)."""
    words = shlex.split(example)
    return (words[0] == "tracekit" and not {"&&", "|", ">", "--db"} & set(words)
            and words[1] not in ("ingest", "lab", "tls-keys", "sql"))


RUNNABLE = [(p, ex) for p in COMMANDS for ex in _examples(p) if _runnable(ex)]
TAKES_DB = {p for p, cmd in _commands() if any(o.name == "db" for o in cmd.params)}


@pytest.mark.parametrize("path, example", RUNNABLE, ids=[ex for _, ex in RUNNABLE])
def test_example_runs(demo_store, tmp_path, path, example):
    """Each in its own process, as a user runs it (charts go to a temporary folder);
    one that writes to the store (analyze, clock --apply) gets a copy of it, so
    the store the other tests share stays as the fixture made it."""
    import shutil
    import subprocess
    import sys
    words = shlex.split(example)
    store = demo_store
    if words[1] == "analyze" or "--apply" in words:
        store = tmp_path / "copy.duckdb"
        shutil.copy(demo_store, store)
    args = words[1:] + (["--db", str(store)] if path in TAKES_DB else [])
    r = subprocess.run([sys.executable, "-m", "tracekit.cli", *args], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, f"{example}: {r.stderr}"
    assert r.stdout.strip(), example


@pytest.mark.parametrize("args, says", [
    (["sessions", "--capture", "99"], "no capture 99 in the store"),
    (["retransmissions", "--capture", "3", "--flow", "999"], "no flow 999 of capture 3"),
    (["attribute", "--run", "no-such-run"], "no run 'no-such-run' in the store"),
    (["sessions", "--bogus"], "No such option '--bogus'."),  # (click may suggest --out...)
    (["bogus"], "No such command 'bogus'"),
    (["ablation"], "Missing option '--compare'"),
])
def test_errors_are_one_line(demo_store, args, says):
    """Unknown ids and usage errors: exit 2 and one line on stderr, never an empty table."""
    import subprocess
    import sys
    db = [] if args[0] == "bogus" or "--bogus" in args else ["--db", str(demo_store)]
    r = subprocess.run([sys.executable, "-m", "tracekit.cli", *args, *db], capture_output=True,
                       text=True)
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("tracekit: error: ") and says in line, line
