"""The analysis DAG (tracekit/pipeline/dag.py): what each analysis declares it
reads is what its query reads, and the order and versions follow from it."""

import json

import duckdb
import pytest

from tracekit.pipeline import dag
from tracekit.pipeline.steps import CODE_STEPS
from tracekit.store.db import analyses_dir

SQL_FILES = sorted(analyses_dir().glob("*.sql")) + sorted(analyses_dir().glob("views/*.sql"))


def query_reads(sql):
    """The tables a query reads, from DuckDB's own parse of it (CTEs left out)."""
    con = duckdb.connect()
    tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])
    assert not tree["error"], tree.get("error_message")
    tables, ctes = set(), set()

    def walk(x):
        if isinstance(x, dict):
            if x.get("type") == "BASE_TABLE":
                tables.add(x["table_name"])
            for entry in (x.get("cte_map") or {}).get("map", []):
                ctes.add(entry["key"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(tree)
    return tables - ctes


@pytest.mark.parametrize("path", SQL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_an_analysis_header_names_exactly_the_tables_its_query_reads(path):
    text = path.read_text()
    declared = dag.header(text, path.name)["Sources"]
    assert set(declared) == query_reads(text), path.name
    assert list(declared) == sorted(declared)  # one way to write them


@pytest.mark.parametrize("module", CODE_STEPS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_a_code_step_declares_every_table_its_queries_read(module):
    read = set()
    for name, value in vars(module).items():
        if not name.endswith("SQL"):
            continue
        for sql in (value.values() if isinstance(value, dict) else [value]):
            if sql.lstrip().upper().startswith(("SELECT", "WITH")):
                read |= query_reads(sql)
    read = {t for t in read if not t.startswith("_")}  # its own temporary tables
    assert read and read <= set(module.READS), (module.__name__, read - set(module.READS))
    assert module.SCOPE in ("capture", "store")


def test_every_step_runs_after_the_steps_that_write_what_it_reads():
    nodes = dag.order()
    seen = set()
    writes = {t: n.name for n in nodes for t in n.writes}
    for n in nodes:
        assert {writes[t] for t in n.reads if t in writes} - {n.name} <= seen, n.name
        seen.add(n.name)
    # the per-capture steps, and the views of their tables, come before every
    # store-wide one (a view of a store-wide table, request_attributes of
    # requests, after it)
    store_wide = {t for n in nodes if n.kind.startswith("store") for t in n.writes}
    kinds = [n.kind.startswith("store") or (n.kind == "view" and bool(store_wide & set(n.reads)))
             for n in nodes]
    assert kinds == sorted(kinds)
    assert [n.name for n in nodes if n.kind == "view" and store_wide & set(n.reads)] == [
        "request_attributes"]


def test_a_circle_of_analyses_is_refused_by_name():
    a = dag.Node("a", "store", ("a",), ("b",))
    b = dag.Node("b", "store", ("b",), ("a",))
    with pytest.raises(ValueError, match="circle: a, b"):
        dag.order([a, b])


def test_a_changed_analysis_rebuilds_what_reads_it_and_nothing_else():
    nodes = dag.order()
    own = {n.name: "v1" for n in nodes}
    before = dag.versions(own, nodes)
    after = dag.versions({**own, "retransmissions": "v2"}, nodes)
    changed = {name for name in before if before[name] != after[name]}
    # downstream of retransmissions: recovery_rounds, stalls, spurious_verdicts, and on
    assert {"retransmissions", "recovery_rounds", "stalls", "spurious_verdicts",
            "request_phases", "attribution"} <= changed
    assert not changed & {"tcp_analysis", "tls_messages", "rtt_summary", "handshakes",
                          "serving", "runs", "playback"}


def test_a_header_without_sources_or_with_an_unknown_step_is_named():
    with pytest.raises(ValueError, match="x.sql: no '-- Sources:' line"):
        dag.header("-- x: nothing\nSELECT 1", "x.sql")
    with pytest.raises(ValueError, match="Step 'sometimes' is not one of"):
        dag.header("-- Step: sometimes.\n-- Sources: a.\nSELECT 1", "x.sql")
