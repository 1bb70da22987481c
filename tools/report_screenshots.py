"""Retake the report's screenshots in docs/ with the browser harness
(tests/browser.py: Debian's chromium, headless and offline).

    python tools/report_screenshots.py --db demo.duckdb   # the store `make demo` builds
    python tools/report_screenshots.py --big big.duckdb    # and a big capture's store

Writes out/report-demo.html (the whole store) and
out/report-counterfactual.html (`--experiment counterfactual`), and their
first screens (1200 x 1000 px) as docs/report-demo.png and
docs/report-counterfactual.png; checks each page drew every chart without an
error, starts the answer in that screen, and is under 300 KB as PNG. With
`--big STORE` (a store of benchmarks/make_capture.py's 2.8-2.9 M-packet capture,
analysed; the capture and the store stay out of git) it takes only that
store's report, docs/report-big-capture.png, under 200 KB, and prints how
long the report took and how big its page is.
"""

import argparse
import pathlib
import re
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
SHOTS = {"report-demo": (), "report-counterfactual": ("counterfactual",)}


def main(argv=None):
    from browser import check_drawn, dump, screenshot

    import tracekit
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--db", default="demo.duckdb", help="the store (default: demo.duckdb)")
    args.add_argument("--out", default=str(ROOT / "out"), help="where the HTML goes")
    args.add_argument("--big", default=None, metavar="STORE",
                      help="only the report of this store, as docs/report-big-capture.png")
    opts = args.parse_args(argv)
    out = pathlib.Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    shots = {"report-big-capture": ()} if opts.big else SHOTS
    limit = 200_000 if opts.big else 300_000
    for name, experiment in shots.items():
        html = out / f"{name}.html"
        started = time.perf_counter()
        with tracekit.open(opts.big or opts.db, read_only=True) as store:
            page = store.report(html, experiment=experiment[0] if experiment else None)
        print(f"{html}: {len(page) / 1e6:.2f} MB in {time.perf_counter() - started:.1f} s")
        dom = dump(html)
        charts = check_drawn(dom)
        top, bottom = map(int, re.search(r'<body data-answer="(\d+)-(\d+)"', dom).groups())
        if top > 200:
            raise SystemExit(f"{html}: the answer starts at {top} px, not in the first screen")
        png = screenshot(html, ROOT / "docs" / f"{name}.png")
        size = png.stat().st_size
        if size >= limit:
            raise SystemExit(f"{png}: {size:,} bytes, over {limit // 1000} KB")
        print(f"{png.relative_to(ROOT)}: {size:,} bytes; {len(charts)} charts drawn; "
              f"the answer at {top}-{bottom} px")


if __name__ == "__main__":
    main()
