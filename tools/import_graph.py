"""The drawing of tracekit's imports between its layers (docs/architecture.md).

    python tools/import_graph.py            # a Mermaid flowchart, layer to layer

Every `import` and `from ... import` of every module (those inside functions
too) is counted from the module's folder at the package's first level (its
layer) to the layer of what it imports; imports within a layer are left
out. docs/architecture.md holds the output between its `import-graph`
markers and tests/test_architecture.py checks that it is current.
"""

import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1] / "tracekit"
ORDER = ("cli", "api", "model", "presentation", "whatif", "lab", "pipeline", "store",
         "readers", "kernels", "core")


def layer_of(module):
    parts = module.split(".")
    if len(parts) == 1:
        return "face"
    return parts[1]


def module_name(path):
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path):
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "tracekit":  # `from .. import x`: x names the module
                for alias in node.names:
                    yield f"tracekit.{alias.name}"
            elif target.startswith("tracekit."):
                yield target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tracekit."):
                    yield alias.name


def layer_edges():
    edges = {}
    for path in sorted(ROOT.rglob("*.py")):
        src = layer_of(module_name(path))
        for target in imports(path):
            dst = layer_of(target)
            if dst != src and src != "face":
                edges[(src, dst)] = edges.get((src, dst), 0) + 1
    return edges


def mermaid():
    edges = layer_edges()
    lines = ["```mermaid", "flowchart TD"]
    for a, b in sorted(edges, key=lambda e: (ORDER.index(e[0]), ORDER.index(e[1]))):
        lines.append(f"    {a} -->|{edges[(a, b)]}| {b}")
    lines.append("```")
    return "\n".join(lines)


def upward(edges=None):
    """Edges that go from a lower layer to a higher one (there must be none)."""
    edges = layer_edges() if edges is None else edges
    return [(a, b) for a, b in edges if ORDER.index(b) < ORDER.index(a)
            and not {a, b} <= {"api", "model"}]


if __name__ == "__main__":
    sys.stdout.write(mermaid() + "\n")
