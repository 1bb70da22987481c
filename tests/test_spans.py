"""One registry of spans (tracekit/core/spans.py): the attribution writes
exactly those spans, with the same irreducible flags, and every place that
names spans names them from it."""

import re

from tracekit.core import spans
from tracekit.presentation.ablation import REMOVES
from tracekit.store.db import analyses_dir

CATALOGUE = re.compile(r"\('[a-z_]+', \d+, '([a-z_]+)', '(?:setup|upload|wait|download|tail)', "
                       r"(true|false),")


def _sql_spans():
    sql = (analyses_dir() / "attribution.sql").read_text()
    catalogued = {}
    for name, irreducible in CATALOGUE.findall(sql):
        catalogued.setdefault(name, set()).add(irreducible == "true")
    written = set(re.findall(r"'([a-z_]+)' AS span\b", sql))
    return catalogued, written


def test_the_attribution_writes_exactly_the_registered_spans():
    catalogued, written = _sql_spans()
    assert set(catalogued) | written == set(spans.NAMES)


def test_a_span_is_irreducible_in_the_sql_exactly_when_the_registry_says():
    catalogued, _ = _sql_spans()
    for name, flags in catalogued.items():
        assert flags == {spans.BY_NAME[name].irreducible}, name


def test_the_predicted_and_coloured_spans_are_registered_ones():
    from tracekit.presentation.ablation_charts import SPAN_COLORS
    assert set(SPAN_COLORS) == set(spans.NAMES)
    assert {s for removed in REMOVES.values() for s in removed} <= set(spans.NAMES)
    assert len(set(spans.COLORS.values())) == len(spans.SPANS)  # no two look alike
    assert spans.COLORS["unexplained"] == "#000000"
