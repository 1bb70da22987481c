"""Read the tshark oracles of ../shared/captures (see its README)."""

import csv

from conftest import SHARED  # noqa: E402 (one definition: TRACEKIT_SHARED moves it)

ORACLE = SHARED / "oracle"


def captures():
    """Names of the shared captures, from the manifest ([] without ../shared: the
    tests parametrized by them are skipped, "got empty parameter set")."""
    return list(manifest())


def manifest():
    if not (SHARED / "MANIFEST.tsv").exists():
        return {}
    with open(SHARED / "MANIFEST.tsv") as f:
        return {row["file"]: row for row in csv.DictReader(f, delimiter="\t")}


def read_tsv(name, kind):
    path = ORACLE / f"{name}.{kind}.tsv"
    if not path.exists():
        return []
    with open(path) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def epoch_ns(text):
    """'1294814876.674038000' -> int ns, exactly."""
    sec, _, frac = text.partition(".")
    return int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])


def capinfos_packets(name):
    for line in (ORACLE / f"{name}.capinfos.txt").read_text().splitlines():
        if line.startswith("Number of packets:"):
            value = line.split(":", 1)[1].strip()
            scale = {"k": 1000, "M": 1000000}.get(value[-1], 1) if value[-1] in "kM" else 1
            return int(value.rstrip(" kM")) * scale
    raise ValueError(name)
