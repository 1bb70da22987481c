"""The analysis DAG: which step builds which table from which, and in what order.

Strategy (the dbt idea): every relation declares what it reads, and the
order is derived, never listed by hand. An SQL analysis is a file
analyses/<table>.sql whose header says

    -- Step: capture | view | store | store, in parts | none.
    -- Sources: table, table, ...

(`capture`: built per capture, in batches of consecutive captures;
`view`: a view, nothing stored; `store`: built over the whole store at once;
`store, in parts`: the same in parts of requests; `none`: a query run on
demand, not a step). A code step is a module of tracekit.pipeline.steps that
declares TABLES (what it writes), READS and SCOPE (`capture` or `store`).
tests/test_dag.py parses every query with DuckDB and fails when a header's
Sources differ from what the query reads.

The order is a topological sort (per-capture steps and views before the
store-wide ones, then by name; a view of a store-wide table, such as
request_attributes of `requests`, after that table), and a step's version is a
hash of its own text and the versions of the steps that build what it
reads: changing one analysis rebuilds it and what depends on it, nothing
else.
"""

import hashlib
import re
from dataclasses import dataclass

from ..store.db import analyses_dir

KINDS = ("capture", "view", "store", "store, in parts", "none")
HEADER = re.compile(r"^-- (Step|Sources): (.*?)\.?\s*$", re.M)


@dataclass(frozen=True)
class Node:
    """One step of the DAG: its name (the first table it writes), kind, the
    tables it writes and reads, and for a code step its module."""

    name: str
    kind: str
    writes: tuple
    reads: tuple
    module: object = None


def header(text, where="an analysis"):
    """{"Step": kind, "Sources": (tables...)} of an SQL file's header."""
    found = {}
    for key, value in HEADER.findall(text):
        found[key] = value.strip()
    if "Sources" not in found:
        raise ValueError(f"{where}: no '-- Sources:' line in its header")
    out = {"Sources": tuple(t.strip() for t in found["Sources"].split(",") if t.strip())}
    if "Step" in found:
        if found["Step"] not in KINDS:
            raise ValueError(f"{where}: Step {found['Step']!r} is not one of {', '.join(KINDS)}")
        out["Step"] = found["Step"]
    return out


def sql_nodes():
    """The SQL steps of analyses/*.sql (those whose Step is not `none`)."""
    out = []
    for path in sorted(analyses_dir().glob("*.sql")):
        h = header(path.read_text(), f"analyses/{path.name}")
        kind = h.get("Step")
        if kind is None:
            raise ValueError(f"analyses/{path.name}: no '-- Step:' line in its header")
        if kind != "none":
            out.append(Node(path.stem, kind, (path.stem,), h["Sources"]))
    return out


def code_nodes():
    """The code steps (tracekit.pipeline.steps.CODE_STEPS)."""
    from .steps import CODE_STEPS
    return [Node(m.TABLES[0], m.SCOPE, tuple(m.TABLES), tuple(m.READS), m) for m in CODE_STEPS]


def order(nodes=None):
    """Every step, each after the steps that write what it reads; the
    per-capture ones first, so that a store-wide step sees every capture's
    failures of this run in its inputs' fingerprint."""
    nodes = list(nodes if nodes is not None else code_nodes() + sql_nodes())
    writer = {t: n.name for n in nodes for t in n.writes}
    needs = {n.name: {writer[t] for t in n.reads if t in writer} - {n.name} for n in nodes}
    by_name = {n.name: n for n in nodes}
    done, out = set(), []
    while len(out) < len(nodes):
        ready = sorted((name for name, deps in needs.items() if name not in done and deps <= done),
                       key=lambda name: (by_name[name].kind.startswith("store"), name))
        if not ready:
            left = sorted(set(needs) - done)
            raise ValueError(f"the analyses read each other in a circle: {', '.join(left)}")
        done.add(ready[0])
        out.append(by_name[ready[0]])
    return out


def upstream(nodes):
    """{step: names of the steps that write what it reads}."""
    writer = {t: n.name for n in nodes for t in n.writes}
    return {n.name: sorted({writer[t] for t in n.reads if t in writer} - {n.name}) for n in nodes}


def downstream(names, nodes=None):
    """The steps that read, directly or through others, what the steps `names`
    write (`names` not included)."""
    nodes = list(nodes if nodes is not None else code_nodes() + sql_nodes())
    ups = upstream(nodes)
    found = set(names)
    grew = True
    while grew:
        more = {n for n, deps in ups.items() if n not in found and found & set(deps)}
        found |= more
        grew = bool(more)
    return found - set(names)


def versions(own, nodes):
    """{step: version}: a hash of its own version (`own[name]`) and its
    upstream steps' versions, in DAG order."""
    ups = upstream(nodes)
    out = {}
    for n in nodes:
        digest = hashlib.sha256(own[n.name].encode())
        for u in ups[n.name]:
            digest.update(out[u].encode())
        out[n.name] = digest.hexdigest()[:16]
    return out
