"""The package's imports read in data-path order: no module imports, however lazily, a module
that leads back to it, and the blueprint schema does not import the preflight rules. The graph
is read from the source (every import statement, at the top or inside a function; only
`if TYPE_CHECKING:` blocks, which never run, are left out), so a cycle closed by a lazy import
fails here too."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "rackform"


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking(node):
            yield from (n for child in node.orelse for n in _imports_of(child))
            continue
        yield from _imports_of(node)


def _imports_of(node: ast.AST):
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        for alias in node.names:
            yield node.module, alias.name
    else:
        yield from _imports(node)


def graph() -> dict[str, set[str]]:
    """Module -> the rackform modules it imports. Importing `a.b.c` runs `a` and `a.b` first,
    so a module's parent packages count as imported too."""
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for target, name in _imports(ast.parse(path.read_text(), str(path))):
            if not target.startswith("rackform"):
                continue
            full = f"{target}.{name}" if name and f"{target}.{name}" in mods else target
            parts = full.split(".")
            for i in range(1, len(parts) + 1):
                dep = ".".join(parts[:i])
                if dep in mods and dep != mod:
                    edges[mod].add(dep)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in edges[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def test_the_package_has_no_import_cycle():
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_lazy_cycle():
    # The test above could not fail if the finder missed cycles: show it finds one.
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    src = "def f():\n    from rackform.engine import prepare\n"
    assert list(_imports(ast.parse(src))) == [("rackform.engine", "prepare")]
    guarded = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import rackform.engine\n"
    assert [t for t, _ in _imports(ast.parse(guarded))] == ["typing"]


def test_the_schema_does_not_import_the_preflight_rules():
    edges = graph()
    schema = reachable(edges, "rackform.blueprint.schema.model")
    rules = {m for m in edges if m.startswith("rackform.preflight.")} - {"rackform.preflight.codes"}
    assert schema & rules == set()
    assert "rackform.preflight.codes" in schema  # waivers are checked against the codes' data


def test_only_the_registry_names_the_targets():
    # Outside rackform/targets/, nothing imports a target's package: the engine reaches every
    # target through its adapter in the registry.
    edges = graph()
    for mod, deps in edges.items():
        if mod.startswith("rackform.targets"):
            continue
        direct = {d for d in deps if d.startswith("rackform.targets.")}
        assert direct <= {"rackform.targets", "rackform.targets.registry"}, (mod, direct)
