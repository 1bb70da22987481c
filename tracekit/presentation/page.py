"""One HTML page of charts and tables, rendered from a Jinja2 template with
autoescaping (templates/page.html.j2).

Every chart is a Vega-Lite spec; the specs reach the page as one
`<script type="application/json">` block whose text is JSON with `<`, `>`,
`&` and U+2028/U+2029 written as `\\uXXXX` escapes: no value in the store (a
request id, a file name, a label) can close the element or start markup, and
the browser never runs it (an application/json block is data). Vega,
Vega-Lite and Vega-Embed are inlined once per page (vl-convert's bundle), so
the page opens offline.
"""

import datetime
import importlib
import json
import math

from ..core.errors import TracekitError
from ..core.version import __version__

# what the report and the charts import, by the name pip installs it under:
# dependencies of tracekit (a default install has them; pyproject.toml)
CHART_MODULES = {"altair": "altair", "vl_convert": "vl-convert-python", "jinja2": "jinja2"}


def require_chart_modules():
    """One line naming what is missing, before any work, when an install lacks
    the charts' modules (removed by hand, or an install without dependencies)."""
    missing = []
    for module, dist in CHART_MODULES.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(dist)
    if missing:
        raise TracekitError(f"report and plot need {', '.join(missing)}, part of tracekit's "
                            f"install but missing from this one: pip install {' '.join(missing)}")

_INERT = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026",
          0x2028: "\\u2028", 0x2029: "\\u2029"}


def inert_json(value):
    """JSON text safe inside any HTML element (script included): the markup
    characters and the JavaScript line separators are escaped."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False,
                      default=str).translate(_INERT)


def cell(value):
    """A table cell's text: floats to 6 significant digits, None empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def _environment():
    import jinja2
    return jinja2.Environment(loader=jinja2.PackageLoader("tracekit.presentation", "templates"),
                              autoescape=True, trim_blocks=True, lstrip_blocks=True,
                              undefined=jinja2.StrictUndefined)


class Page:
    """Sections of blocks, rendered once: `section(heading)` returns a list to
    append blocks to (`table`, `chart`, `text` build them)."""

    def __init__(self, title):
        self.title = title
        self.summary = []  # blocks shown first, before the table of contents
        self.sections = []  # (anchor, heading, blocks)
        self.specs = {}
        self.replays = 0  # what-if replays run (html.REPLAYS)

    def section(self, heading, anchor=None):
        blocks = []
        self.sections.append((anchor or f"s{len(self.sections)}", heading, blocks))
        return blocks

    def chart(self, chart, caption):
        cid = f"chart{len(self.specs)}"
        self.specs[cid] = chart if isinstance(chart, dict) else chart.to_dict()
        return {"kind": "chart", "id": cid, "caption": caption}

    @staticmethod
    def table(columns, rows, limit=None, note=None, keys=None):
        """`keys`: a request key per row, for the explorer's links (presentation/explorer.py)."""
        shown = rows if limit is None else rows[:limit]
        more = len(rows) - len(shown)
        numeric = [bool(rows) and all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool)
                                      or r[i] is None for r in rows) for i in range(len(columns))]
        if more:
            note = (note + " " if note else "") + (f"{more:,} more rows: the CLI's views and "
                                                   f"tracekit sql show them all.")
        cells = [[cell(v) for v in r] for r in shown]
        long = [any(len(r[i]) > 40 for r in cells) for i in range(len(columns))]
        return {"kind": "table", "columns": list(columns), "numeric": numeric, "long": long,
                "rows": cells, "note": note, "row_keys": None if keys is None else keys[:len(shown)]}

    @staticmethod
    def text(text, heading=None, cls=None):
        return {"kind": "text", "text": text, "heading": heading, "cls": cls}

    def render(self):
        import vl_convert
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        template = _environment().get_template("page.html.j2")
        return template.render(title=self.title, version=__version__, stamp=stamp,
                               summary=self.summary, sections=self.sections,
                               specs=inert_json(self.specs), charts=bool(self.specs),
                               bundle=vl_convert.javascript_bundle() if self.specs else "")
