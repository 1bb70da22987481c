"""How much a fresh install of tracekit takes on disk, with and without extras.

    python tools/install_size.py                 # default install, and [charts]
    python tools/install_size.py --extras charts,cluster

Builds the wheel of this tree (`pip wheel --no-deps`, the kernels compiled by
the build hook), then for each variant makes a fresh venv in a temporary
folder, `pip install`s the wheel (with the extra) from the package index, and
prints the size of the venv's site-packages (the bytes of its files, as
`du --apparent-size` counts them) and the largest packages in it. Nothing is
kept (the wheels pip fetched stay in pip's own cache).
"""

import argparse
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def tree_bytes(path):
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def install(wheel, extra, work):
    venv = work / f"venv-{extra or 'default'}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
           "--disable-pip-version-check"]
    subprocess.run(pip + [f"{wheel}[{extra}]" if extra else str(wheel)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    own = {p.name for p in site.iterdir()} - {"pip", "_distutils_hack", "setuptools"}
    sizes = sorted(((tree_bytes(site / n) if (site / n).is_dir() else (site / n).stat().st_size, n)
                    for n in own if not n.endswith((".dist-info", ".pth"))), reverse=True)
    return sum(s for s, _ in sizes), sizes


def main(argv=None):
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--extras", default="charts", help="comma-separated extras to measure")
    opts = args.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tk-install-size-") as tmp:
        work = pathlib.Path(tmp)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                        str(work / "wheel"), str(ROOT)], check=True)
        wheel = next((work / "wheel").glob("tracekit-*.whl"))
        print(f"{wheel.name}: {wheel.stat().st_size / 1e6:.1f} MB")
        base = None
        for extra in [None, *[e for e in opts.extras.split(",") if e]]:
            total, sizes = install(wheel, extra, work)
            base = total if base is None else base
            top = ", ".join(f"{n} {s / 1e6:.0f}" for s, n in sizes[:6])
            more = "" if extra is None else f" (+{(total - base) / 1e6:.0f} MB)"
            print(f"tracekit{f'[{extra}]' if extra else ''}: site-packages "
                  f"{total / 1e6:.0f} MB{more}; largest (MB): {top}")


if __name__ == "__main__":
    main()
