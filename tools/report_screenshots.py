"""Retake the report's screenshots in docs/ with the browser harness
(tests/browser.py: Debian's chromium, headless and offline).

    python tools/report_screenshots.py --db demo.duckdb   # the store `make demo` builds

Writes out/report-demo.html (the whole store) and
out/report-counterfactual.html (`--experiment counterfactual`), and their
first screens (1200 x 1000 px) as docs/report-demo.png and
docs/report-counterfactual.png; checks each page drew every chart without an
error, starts the answer in that screen, and is under 300 KB as PNG.
"""

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
SHOTS = {"report-demo": (), "report-counterfactual": ("counterfactual",)}


def main(argv=None):
    from browser import check_drawn, dump, screenshot

    import tracekit
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--db", default="demo.duckdb", help="the store (default: demo.duckdb)")
    args.add_argument("--out", default=str(ROOT / "out"), help="where the HTML goes")
    opts = args.parse_args(argv)
    out = pathlib.Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, experiment in SHOTS.items():
        html = out / f"{name}.html"
        with tracekit.open(opts.db, read_only=True) as store:
            store.report(html, experiment=experiment[0] if experiment else None)
        dom = dump(html)
        charts = check_drawn(dom)
        top, bottom = map(int, re.search(r'<body data-answer="(\d+)-(\d+)"', dom).groups())
        if top > 200:
            raise SystemExit(f"{html}: the answer starts at {top} px, not in the first screen")
        png = screenshot(html, ROOT / "docs" / f"{name}.png")
        size = png.stat().st_size
        if size >= 300_000:
            raise SystemExit(f"{png}: {size:,} bytes, over 300 KB")
        print(f"{png.relative_to(ROOT)}: {size:,} bytes; {len(charts)} charts drawn; "
              f"the answer at {top}-{bottom} px")


if __name__ == "__main__":
    main()
