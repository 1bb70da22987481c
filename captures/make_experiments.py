"""Recreate the lab-* samples: the two reference experiments (the recipe is
the provenance).

Runs experiments/cross-region.toml and experiments/counterfactual.toml with
`tracekit lab run` (real kernel TCP over tracekit's emulated WAN, kcptun for
the tunnel) and keeps, per run, the client-side capture(s) (headers only),
both event logs, the emulator's drop log and summary, and the manifest, in
captures/lab/<run>/ (server-side captures and the per-packet delivery logs
are left out for size).
`make demo` ingests them with captures/lab/*.runs.json. Needs root, tcpdump
and kcptun; about two minutes.

    sudo .venv/bin/python captures/make_experiments.py
"""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "lab")
KEEP = ("client.pcap", "client-loopback.pcap", "client-events.jsonl", "server-events.jsonl",
        "drops.jsonl", "forwarder.json", "manifest.json")


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    with tempfile.TemporaryDirectory() as work:
        for name in ("cross-region", "counterfactual"):
            subprocess.run([sys.executable, "-m", "tracekit.cli", "lab", "run",
                            os.path.join(ROOT, "experiments", f"{name}.toml"), "--out", work,
                            "--db", os.path.join(work, "lab.duckdb")], check=True, cwd=ROOT)
            shutil.copy(os.path.join(work, f"{name}.runs.json"), OUT)
        for run in sorted(os.listdir(work)):
            src = os.path.join(work, run)
            if not os.path.isdir(src):
                continue
            os.makedirs(os.path.join(OUT, run))
            for f in KEEP:
                if os.path.exists(os.path.join(src, f)):
                    shutil.copy(os.path.join(src, f), os.path.join(OUT, run, f))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
