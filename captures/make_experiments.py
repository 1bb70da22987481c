"""Recreate the lab-* samples: the two reference experiments (the recipe is
the provenance), or the experiments named on the command line into a folder
of their own:

    sudo .venv/bin/python captures/make_experiments.py chapter-case --out captures/chapter-case


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


def main(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("experiments", nargs="*", default=["cross-region", "counterfactual"])
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    out = args.out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    with tempfile.TemporaryDirectory() as work:
        for name in args.experiments:
            subprocess.run([sys.executable, "-m", "tracekit.cli", "lab", "run",
                            os.path.join(ROOT, "experiments", f"{name}.toml"), "--out", work,
                            "--db", os.path.join(work, "lab.duckdb")], check=True, cwd=ROOT)
            shutil.copy(os.path.join(work, f"{name}.runs.json"), out)
        for run in sorted(os.listdir(work)):
            src = os.path.join(work, run)
            if not os.path.isdir(src):
                continue
            os.makedirs(os.path.join(out, run))
            for f in KEEP:
                if os.path.exists(os.path.join(src, f)):
                    shutil.copy(os.path.join(src, f), os.path.join(out, run, f))
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
