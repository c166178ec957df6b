"""The package's imports follow its floor plan: no module imports, however lazily or only for
its types, a module that leads back to it; no two packages import each other; packages sit in
layers (the table below) and at most three imports run from a lower layer up to a higher one;
compile reaches nothing that opens a socket or runs a process; the blueprint schema imports
neither the preflight rules nor any compile, stack or reaper code; each layer reaches a
target's parts only through that layer's registry; validation evidence sits below the stack and
gitops, and the stack imports no gitops.
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


def package(module: str) -> str:
    """A module's package: its first name under rackform/ (`rackform.plan.compile` -> `plan`,
    `rackform.engine` -> `engine`; the package's own `__init__` -> `rackform`)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_pairs(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Packages that import each other, by any route of one import each way (sorted pairs)."""
    arrows = {(package(m), package(d)) for m, deps in edges.items() for d in deps}
    return {(a, b) for a, b in arrows if a < b and (b, a) in arrows}


def test_no_two_packages_import_each_other():
    assert package_pairs(graph()) == set()


def test_the_pair_finder_sees_a_lazy_pair():
    # One import each way between two packages is a pair, whichever modules they are in and
    # however deep; imports within a package, or one way only, are not.
    edges = {
        "rackform.a.x": {"rackform.b.y"},
        "rackform.b.y": set(),
        "rackform.b.z.w": {"rackform.a"},
        "rackform.a": {"rackform.a.x"},
        "rackform.c": {"rackform.a.x"},
    }
    assert package_pairs(edges) == {("a", "b")}


# The floor plan, from the ground up: each package's layer. A package imports its own layer
# and those below it; an import up to a higher layer is an exception, and there may be at most
# MAX_UPWARD of them. Foundations: data and helpers every layer uses. The blueprint (with each
# target's schema); compile (with each target's compile rules: pure); preflight, and the
# evidence a validation run leaves; the stack (the Pulumi program, its Cluster component and
# stages: a target's part is handed to it); what touches hosts (push, the boot path, the
# acceptance run); the node lifecycle (its core and what Prometheus holds of the nodes; reap,
# heal, rolling changes, the Slurm steps and the
# SSH that reaches a host, the alert rules from the same definition of idleness, the report
# and the Grafana dashboard of what they measure, the local
# testbed VMs an on-premises node image is baked on, the goodput simulation that runs heal's
# decisions); each target's running world (its Pulumi
# components, reaching nodes, power, instances); the engine, which puts a target's layers
# together, and the work it hands the stack's stages; the commands' own logic, which calls the engine (GitOps, `rackform init`); the CLI;
# the reference generated from all of it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("rackform", "catalog", "paths", "printable", "http_opener", "collection", "noanswer"),
    ("blueprint",),
    ("plan",),
    ("preflight", "evidence"),
    ("stack",),
    ("push", "boot", "acceptance"),
    (
        "lifecycle",
        "telemetry",
        "reap",
        "health",
        "rollout",
        "scheduler",
        "alerts",
        "testbed",
        "report",
        "dashboards",
        "goodput",
    ),
    ("targets",),
    ("engine", "stage_work"),
    ("gitops", "init"),
    ("cli", "__main__"),
    ("docs_gen",),
)
LAYER = {p: i for i, layer in enumerate(LAYERS) for p in layer}
MAX_UPWARD = 3


def named(source: str, mods: dict[str, Path]) -> set[str]:
    """The rackform modules a file's import statements name (`from a import b`: `a.b` where
    that is a module), every statement counted (top level, in a function, type-only)."""
    out = set()
    for target, name in _imports(ast.parse(source)):
        full = f"{target}.{name}" if name and f"{target}.{name}" in mods else target
        if full in mods:
            out.add(full)
    return out


def upward(imports: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) for each file's import of a module in a higher layer."""
    return {
        (m, d) for m, deps in imports.items() for d in deps if LAYER[package(d)] > LAYER[package(m)]
    }


def file_imports() -> dict[str, set[str]]:
    mods = modules()
    return {m: named(path.read_text(), mods) for m, path in mods.items()}


def test_every_package_has_a_layer():
    assert {package(m) for m in modules()} - set(LAYER) == set()


# The imports that run up the layers, each for its reason: the Pulumi program's entry
# (`rackform.stack.program.main`, the path every repository's `__main__.py` imports) asks the
# engine for the plan and the target's runtime and hands the stages the work they run (which sits
# above the stack: push, rollout, acceptance); a stage provider unpickled from a stack an earlier
# release wrote finds the work its state names by an old "module:function" string there.
UPWARD = {
    ("rackform.stack.program", "rackform.engine"),
    ("rackform.stack.program", "rackform.stage_work"),
    ("rackform.stack.stages", "rackform.stage_work"),
}


def test_at_most_three_imports_run_up_the_layers():
    up = upward(file_imports())
    assert len(up) <= MAX_UPWARD, sorted(up)
    assert up == UPWARD, sorted(up ^ UPWARD)


def test_the_layer_check_sees_an_upward_import():
    # Counting could not fail if `named` missed a lazy import or `upward` misread the table:
    # one lazy import of the running world from compile is an upward import.
    src = "def f():\n    from rackform.targets.runtimes import runtime\n"
    found = named(src, modules())
    assert found == {"rackform.targets.runtimes"}
    assert upward({"rackform.plan._lazy": found}) == {
        ("rackform.plan._lazy", "rackform.targets.runtimes")
    }
    assert upward({"rackform.targets.runtimes": {"rackform.plan.model"}}) == set()
    many = {f"rackform.plan.m{i}": {"rackform.stack.program"} for i in range(MAX_UPWARD + 1)}
    assert len(upward(many)) > MAX_UPWARD


# What acts on the world: a module that imports any of these (anywhere in it) opens a socket or
# runs a process, and so do these packages of rackform's as a whole.
ACTING_LIBRARIES = (
    "subprocess",
    "socket",
    "socketserver",
    "ssl",
    "http.server",
    "http.client",
    "urllib.request",
    "asyncio",
    "multiprocessing",
    "concurrent.futures",
    "pulumi",
    "pulumi_aws",
    "boto3",
    "botocore",
    "ansible_runner",
)
ACTING_PACKAGES = (
    "rackform.stack",
    "rackform.push",
    "rackform.boot",
    "rackform.acceptance",
    "rackform.reap",
    "rackform.health",
    "rackform.rollout",
    "rackform.scheduler",
    "rackform.lifecycle",
    "rackform.targets",
    "rackform.testbed",
)


def acts(path: Path) -> bool:
    libs = [t for t, _ in _imports(ast.parse(path.read_text(), str(path)))]
    return any(t == lib or t.startswith(lib + ".") for t in libs for lib in ACTING_LIBRARIES)


def acting(edges: dict[str, set[str]], mods: dict[str, Path], start: str) -> set[str]:
    """What `start` reaches that acts: a module of an acting package, or one that imports an
    acting library."""
    reach = reachable(edges, start) | {start}
    return {m for m in reach if m.startswith(ACTING_PACKAGES) or acts(mods[m])}


def test_compile_reaches_nothing_that_acts():
    # Compile is pure: every module it reaches, by any import, neither opens a socket nor runs
    # a process (a target's compile rules included: the registry reaches them all).
    edges, mods = graph(), modules()
    assert acting(edges, mods, "rackform.plan.compile") == set()
    assert acting(edges, mods, "rackform.plan.targets.compilers") == set()
    assert "rackform.plan.targets.aws.compile" in reachable(
        edges, "rackform.plan.targets.compilers"
    )


# Modules that act, as Python loads them: none may be loaded by importing compile.
LOADED_WHEN_ACTING = (
    "subprocess",
    "pulumi",
    "boto3",
    "ansible_runner",
    "http.server",
    "urllib.request",
    "rackform.boot.serve",
    "rackform.boot.node",
    "rackform.scheduler.remote",
    "rackform.reap",
    "rackform.stack",
    "rackform.push",
    "rackform.targets",
)


def loaded_by(module: str) -> list[str]:
    code = f"import sys, {module}\nprint(*sorted(sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}  # this checkout's rackform
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.split()


def _acting_loaded(loaded: list[str]) -> list[str]:
    return [m for m in loaded if m in LOADED_WHEN_ACTING or m.startswith(LOADED_WHEN_ACTING)]


def test_importing_compile_loads_nothing_that_acts():
    loaded = loaded_by("rackform.plan.compile")
    assert "rackform.plan.targets.compile" in loaded
    assert _acting_loaded(loaded) == []


def test_the_compile_checks_would_see_an_acting_module():
    # The two tests above could not fail if reachability missed an edge or the scan missed a
    # library: one import of the SSH runner by a target's compile rules is enough, and so is a
    # module's own lazy `import subprocess`.
    edges, mods = graph(), modules()
    edges["rackform.plan.targets.aws.cost"] = edges["rackform.plan.targets.aws.cost"] | {
        "rackform.scheduler.remote"
    }
    assert "rackform.scheduler.remote" in acting(edges, mods, "rackform.plan.targets.compilers")
    edges["rackform.plan.inventory"] = edges["rackform.plan.inventory"] | {"rackform.boot.serve"}
    assert "rackform.boot.serve" in acting(edges, mods, "rackform.plan.compile")
    assert acts(mods["rackform.scheduler.remote"])
    assert _acting_loaded(loaded_by("rackform.scheduler.remote"))


def test_the_schema_does_not_import_the_preflight_rules():
    edges = graph()
    schema = reachable(edges, "rackform.blueprint.schema.model")
    assert {m for m in schema if m.startswith("rackform.preflight")} == set()
    assert "rackform.catalog.codes" in schema  # waivers are checked against the codes' data


# What the schema may not reach: compile (plan), preflight, the Pulumi program (stack), the
# reaper, the engine, host configuration, and the running world of every target.
ABOVE_THE_SCHEMA = (
    "rackform.plan",
    "rackform.preflight",
    "rackform.stack",
    "rackform.reap",
    "rackform.engine",
    "rackform.push",
    "rackform.boot",
    "rackform.targets",
)


def _above(modules) -> set[str]:
    return {m for m in modules if m.startswith(ABOVE_THE_SCHEMA)}


def test_the_schema_imports_no_compile_stack_or_reap_code():
    schema = reachable(graph(), "rackform.blueprint.schema.model")
    assert _above(schema) == set()
    assert "rackform.blueprint.targets.schemas" in schema  # each target's schema is there


def test_importing_the_schema_loads_no_compile_stack_or_reap_module():
    # The same, as Python sees it (an import the source hides from the graph would show here).
    loaded = loaded_by("rackform.blueprint.schema.model")
    assert "rackform.blueprint.targets.aws.schema" in loaded
    assert _above([m for m in loaded if m.startswith("rackform")]) == set()


def test_the_schema_check_would_see_an_upward_import():
    # The tests above could not fail if reachability missed an edge: one more import in a
    # target's schema module is enough to reach compile code.
    edges = graph()
    edges["rackform.blueprint.targets.aws.schema"] = edges[
        "rackform.blueprint.targets.aws.schema"
    ] | {"rackform.plan.targets.aws.compile"}
    assert "rackform.plan.model" in _above(reachable(edges, "rackform.blueprint.schema.model"))


# Each layer's part of the targets, and what code outside it may import of it: its registry
# (which lists every target's part) and the interfaces a target's part implements.
TARGET_LAYERS = {
    "rackform.blueprint.targets": {
        "rackform.blueprint.targets.schemas",
        "rackform.blueprint.targets.schema",
    },
    "rackform.plan.targets": {
        "rackform.plan.targets.compilers",
        "rackform.plan.targets.compile",
        "rackform.plan.targets.offline",
        "rackform.plan.targets.replace_rules",
    },
    "rackform.preflight.targets": set(),  # listed by the preflight rules' own registry
    "rackform.targets": {
        "rackform.targets.runtimes",
        "rackform.targets.runtime",
        "rackform.targets.target",
    },
}
PREFLIGHT_REGISTRY = "rackform.preflight.registry"


def _layer_of(module: str) -> str | None:
    inside = [t for t in TARGET_LAYERS if module == t or module.startswith(t + ".")]
    return max(inside, key=len) if inside else None


def outside_reaches(imports: dict[str, set[str]]) -> dict[str, set[str]]:
    """Module of no target's part -> what it imports of a target's part besides the layers'
    registries and interfaces (none but the preflight registry lists preflight's). A target's
    own parts read each other downward (its compile rules read its schema's data): the layer
    table keeps them in order."""
    out: dict[str, set[str]] = {}
    for mod, deps in imports.items():
        if _layer_of(mod) is not None:
            continue
        for d in deps:
            layer = _layer_of(d)
            if layer is None or d == layer or d in TARGET_LAYERS[layer]:
                continue
            if layer == "rackform.preflight.targets" and mod == PREFLIGHT_REGISTRY:
                continue
            out.setdefault(mod, set()).add(d)
    return out


def test_each_layer_reaches_a_targets_part_only_through_its_registry():
    # A new target adds its package to each layer and a line to each registry: nothing else
    # names a target's module, so nothing else changes.
    assert outside_reaches(file_imports()) == {}


def test_the_registry_check_would_see_a_target_module_named():
    imports = {
        "rackform.cli.plan_cmd": {"rackform.plan.targets.aws.compile"},
        "rackform.engine": {"rackform.plan.targets.compilers", "rackform.targets.runtimes"},
        "rackform.plan.targets.aws.compile": {"rackform.plan.targets.aws.cost"},
    }
    assert outside_reaches(imports) == {
        "rackform.cli.plan_cmd": {"rackform.plan.targets.aws.compile"}
    }


def test_each_layers_registry_reaches_only_its_layer():
    # The schema's registry loads no compile or running-world part of any target, and
    # compile's registry nothing of the running world (Pulumi components, reapers).
    edges = graph()
    assert _above(reachable(edges, "rackform.blueprint.targets.schemas")) == set()
    compile_reach = reachable(edges, "rackform.plan.targets.compilers")
    running = ("rackform.stack", "rackform.reap", "rackform.boot", "rackform.targets")
    assert {m for m in compile_reach if m.startswith(running)} == set()


def _package(edges: dict[str, set[str]], name: str) -> set[str]:
    return {m for m in edges if m == name or m.startswith(name + ".")}


# What the evidence package may not reach: the stack that runs the Validate stage and checks
# the promotion gate, the GitOps commands that promote on its evidence, the CLI, the engine.
ABOVE_THE_EVIDENCE = ("rackform.stack", "rackform.gitops", "rackform.cli", "rackform.engine")
TARGET_PARTS = ("rackform.blueprint.targets", "rackform.plan.targets", "rackform.targets")


def _upward_from_evidence(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Evidence module -> what it reaches above it: the layers above, any target module it
    imports itself (a Plan is all it reads of a target, typed by the targets' schemas), any
    target's compile or running-world part."""
    out = {}
    for mod in _package(edges, "rackform.evidence"):
        reach = reachable(edges, mod)
        up = {m for m in reach if m.startswith(ABOVE_THE_EVIDENCE)}
        up |= {d for d in edges[mod] if d.startswith(TARGET_PARTS)}
        up |= {m for m in reach if m.startswith(("rackform.plan.targets", "rackform.targets"))}
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
