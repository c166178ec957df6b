"""What "Adding a target" promises holds: nothing outside a target's packages branches on a
target's name. A comparison or a match case against a registered target type (`== "aws"`,
`in ("bare_metal", "colocation")`, `case "aws":`) outside the layers' targets packages (the
schema's, compile's, preflight's and the running world's) fails here: such a fact belongs to
the target's schema, compiler or runtime (a hook every target answers), so a new target needs
only its packages and its registry lines."""

from __future__ import annotations

import ast
from pathlib import Path

from rackform.blueprint.targets.schemas import SCHEMAS

ROOT = Path(__file__).resolve().parents[2] / "rackform"
# Each layer's part of the targets: one package per target in each.
TARGET_PARTS = (
    ROOT / "blueprint" / "targets",
    ROOT / "plan" / "targets",
    ROOT / "preflight" / "targets",
    ROOT / "targets",
)


def branches(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every comparison or match case on one of `names`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        sides: list[ast.AST] = []
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
        elif isinstance(node, ast.MatchValue):
            sides = [node.value]
        for side in sides:
            elts = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
            found += [
                (node.lineno, e.value)
                for e in elts
                if isinstance(e, ast.Constant) and e.value in names
            ]
    return found


def test_nothing_outside_the_targets_branches_on_a_targets_name():
    names = set(SCHEMAS)
    outside = [p for p in ROOT.rglob("*.py") if not set(TARGET_PARTS) & set(p.parents)]
    assert len(outside) > 100
    found = {
        f"{p.relative_to(ROOT.parent)}:{line}": name
        for p in outside
        for line, name in branches(p.read_text(encoding="utf-8"), names)
    }
    assert found == {}


def test_the_scan_sees_each_form_of_branch():
    names = {"aws", "bare_metal", "colocation"}
    source = (
        "if plan.target_type == 'aws':\n    pass\n"
        "ok = t.type in ('bare_metal', 'colocation')\n"
        "skip = 'colocation' != kind\n"
        "match t:\n    case 'aws':\n        pass\n"
        # Not branches: a value, a key, a comparison with another word.
        "doc = {'aws': 1, 'target': {'type': 'bare_metal'}}\n"
        "nfs = kind == 'nfs'\n"
    )
    assert branches(source, names) == [
        (1, "aws"), (3, "bare_metal"), (3, "colocation"), (4, "colocation"), (6, "aws"),
    ]  # fmt: skip
