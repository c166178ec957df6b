"""The package's imports read in data-path order: no module imports, however lazily or only for
its types, a module that leads back to it; the blueprint schema imports neither the preflight
rules nor any compile, stack or reaper code; only the engine puts a target's layers together;
validation evidence sits below the stack and gitops, and the stack imports no gitops.
The graph is read from the source (every import statement: at the top, inside a function, or
under `if TYPE_CHECKING:`), so a cycle closed by a lazy or a type-only import fails here too."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "rackform"


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST):
    for node in ast.iter_child_nodes(tree):
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
    # A type-only import counts: the cycle it would close is still a cycle of the design.
    guarded = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import rackform.engine\n"
    assert [t for t, _ in _imports(ast.parse(guarded))] == ["typing", "rackform.engine"]


def test_the_schema_does_not_import_the_preflight_rules():
    edges = graph()
    schema = reachable(edges, "rackform.blueprint.schema.model")
    rules = {m for m in edges if m.startswith("rackform.preflight.")} - {"rackform.preflight.codes"}
    assert schema & rules == set()
    assert "rackform.preflight.codes" in schema  # waivers are checked against the codes' data


# What the schema may not reach: compile (plan), the Pulumi program (stack), the reaper, the
# engine, host configuration, and the other layers' target registries.
ABOVE_THE_SCHEMA = (
    "rackform.plan",
    "rackform.stack",
    "rackform.reap",
    "rackform.engine",
    "rackform.push",
    "rackform.boot",
    "rackform.targets.compilers",
    "rackform.targets.runtimes",
    "rackform.targets.compile",
    "rackform.targets.runtime",
    "rackform.targets.target",
)


def _above(modules) -> set[str]:
    return {m for m in modules if m.startswith(ABOVE_THE_SCHEMA)}


def test_the_schema_imports_no_compile_stack_or_reap_code():
    # Every target module the schema reaches is then one that itself reaches none of these: a
    # target's compile or runtime part (its Pulumi component, its reaper) imports plan/.
    schema = reachable(graph(), "rackform.blueprint.schema.model")
    assert _above(schema) == set()
    assert "rackform.targets.schemas" in schema  # the targets' part is there, and only it


def test_importing_the_schema_loads_no_compile_stack_or_reap_module():
    # The same, as Python sees it (an import the source hides from the graph would show here).
    code = (
        "import sys, rackform.blueprint.schema.model\n"
        "print(*sorted(m for m in sys.modules if m.startswith('rackform')))"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}  # this checkout's rackform
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert "rackform.targets.aws.schema" in loaded
    assert _above(loaded) == set()
    assert [m for m in loaded if m.endswith((".compile", ".runtime", ".reap", ".cluster"))] == []


def test_the_schema_check_would_see_an_upward_import():
    # The tests above could not fail if reachability missed an edge: one more import in a
    # target's schema module is enough to reach compile code.
    edges = graph()
    edges["rackform.targets.aws.schema"] = edges["rackform.targets.aws.schema"] | {
        "rackform.targets.aws.compile"
    }
    assert "rackform.plan.model" in _above(reachable(edges, "rackform.blueprint.schema.model"))


REGISTRIES = {
    "rackform.targets.schemas",
    "rackform.targets.compilers",
    "rackform.targets.runtimes",
}
# The layers' interfaces: what a target implements, named by the code that calls it.
INTERFACES = {
    "rackform.targets",
    "rackform.targets.schema",
    "rackform.targets.compile",
    "rackform.targets.runtime",
    "rackform.targets.target",
}


def test_only_the_engine_puts_a_targets_layers_together():
    # Outside rackform/targets/, nothing imports a target's package: each layer reaches the
    # targets through its own registry, and only the engine reads more than one of them.
    edges = graph()
    for mod, deps in edges.items():
        if mod.startswith("rackform.targets"):
            continue
        direct = {d for d in deps if d.startswith("rackform.targets")}
        assert direct <= REGISTRIES | INTERFACES, (mod, direct - REGISTRIES - INTERFACES)
        if mod != "rackform.engine":
            assert len(direct & REGISTRIES) <= 1, (mod, direct & REGISTRIES)
    assert edges["rackform.engine"] >= REGISTRIES


def test_each_layers_registry_reaches_only_its_layer():
    # The schema's registry loads no compile or runtime part of any target, and compile's
    # registry none of the running world's (Pulumi components, reapers).
    edges = graph()
    assert _above(reachable(edges, "rackform.targets.schemas")) == set()
    compile_reach = reachable(edges, "rackform.targets.compilers")
    assert not {m for m in compile_reach if m.startswith(("rackform.stack", "rackform.reap"))}
    assert not {m for m in compile_reach if m.endswith((".runtime", ".runtimes", ".reap"))}


def _package(edges: dict[str, set[str]], name: str) -> set[str]:
    return {m for m in edges if m == name or m.startswith(name + ".")}


# What the evidence package may not reach: the stack that runs the Validate stage and checks
# the promotion gate, the GitOps commands that promote on its evidence, the CLI, the engine.
ABOVE_THE_EVIDENCE = ("rackform.stack", "rackform.gitops", "rackform.cli", "rackform.engine")


def _upward_from_evidence(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Evidence module -> what it reaches above it: the layers above, any target module it
    imports itself (a Plan is all it reads of a target, typed by the targets' schemas), any
    target's compile or runtime part."""
    schema_layer = reachable(edges, "rackform.targets.schemas") | {"rackform.targets.schemas"}
    out = {}
    for mod in _package(edges, "rackform.evidence"):
        reach = reachable(edges, mod)
        up = {m for m in reach if m.startswith(ABOVE_THE_EVIDENCE)}
        up |= {d for d in edges[mod] if d.startswith("rackform.targets")}
        up |= {m for m in reach if m.startswith("rackform.targets") and m not in schema_layer}
        if up:
            out[mod] = up
    return out


def _gitops_from_stack(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Stack module -> the GitOps or CLI modules it reaches."""
    out = {}
    for mod in _package(edges, "rackform.stack"):
        up = {m for m in reachable(edges, mod) if m.startswith(("rackform.gitops", "rackform.cli"))}
        if up:
            out[mod] = up
    return out


def test_the_evidence_package_sits_below_the_stack_and_gitops():
    """The verdict and what a validation run proves (the pin, the signed statement, the keys
    trusted) are read by the Validate stage and the promotion gate (stack) and by `rackform
    promote` (gitops): the evidence package imports none of them, by any route, nor the CLI, the
    engine or a target's compile or runtime part."""
    edges = graph()
    assert _upward_from_evidence(edges) == {}
    assert "rackform.evidence.statement" in reachable(edges, "rackform.stack.stages")
    assert "rackform.evidence.pin" in reachable(edges, "rackform.stack.promotion")
    assert "rackform.evidence.statement" in reachable(edges, "rackform.gitops.promote")
    assert "rackform.evidence.verdict" in reachable(edges, "rackform.evidence.statement")


def test_the_stack_imports_no_gitops_code():
    """The GitOps commands (diff, promote, drift) read the stack; the stack, which runs the
    Validate stage and checks the promotion gate, reads none of them, by any route, nor the CLI."""
    edges = graph()
    assert _gitops_from_stack(edges) == {}
    assert "rackform.stack.promotion" in reachable(edges, "rackform.gitops.promote")


def test_the_layer_checks_would_see_an_upward_import():
    # The two tests above could not fail if reachability missed an edge: one import of the
    # kind the old cycle had (the pin reading a stack module, the stack reading gitops through
    # the evidence it imports) is enough, and so is one of a target's own modules.
    edges = graph()
    edges["rackform.evidence.pin"] = edges["rackform.evidence.pin"] | {"rackform.stack.shipped"}
    edges["rackform.stack.shipped"] = set()
    assert "rackform.stack.shipped" in _upward_from_evidence(edges)["rackform.evidence.statement"]
    edges = graph()
    edges["rackform.evidence.trust"] = edges["rackform.evidence.trust"] | {"rackform.targets.aws"}
    assert _upward_from_evidence(edges)["rackform.evidence.trust"] >= {"rackform.targets.aws"}
    edges = graph()
    edges["rackform.evidence.signing"] = edges["rackform.evidence.signing"] | {
        "rackform.targets.runtimes"
    }
    assert "rackform.targets.runtimes" in _upward_from_evidence(edges)["rackform.evidence.signing"]
    edges = graph()
    edges["rackform.evidence.shipped"] = edges["rackform.evidence.shipped"] | {
        "rackform.gitops.promote"
    }
    assert "rackform.gitops.promote" in _gitops_from_stack(edges)["rackform.stack.stages"]
