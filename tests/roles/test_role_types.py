"""A role variable typed int or bool in its argument spec arrives as a string from
`-e name=value`, and the spec's validation accepts "1" for an int and "false" for a bool without
converting the variable itself. Every expression of every role (tasks, handlers, vars, defaults,
templates, and the site playbook) that compares such a variable, computes with it or tests it
converts it there (`| int`, `| bool`); printing it, or handing it whole to a module (whose own
argument spec converts it), needs nothing. A static check over Jinja's own parse of each
expression, and the nvme_raid case the issue found: RAID 1 from `-e nvme_raid_level=1`."""

from __future__ import annotations

import warnings
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from gpu_collection import ROLES_DIR, SITE
from jinja2 import nodes
from role_vars import render

ROLES = sorted(p.parent.parent.name for p in ROLES_DIR.glob("*/tasks/main.yml"))
# Task keys Ansible evaluates as a condition (a bare expression, no braces).
CONDITIONS = ("when", "changed_when", "failed_when", "until")
# Filters that convert to each type; filters that pass a value on (its default) to the next.
CONVERTS = {"int": {"int", "string"}, "bool": {"bool", "string"}}
PASS_ON = {"default", "d"}
# Filters that turn a value into text to show (a message, a file): any type prints.
PRINTS = {"to_json", "to_nice_json", "to_yaml", "to_nice_yaml", "quote", "string"}
# Nodes that compare, compute or test: a raw typed variable under one is the bug.
JUDGES = (
    nodes.Compare, nodes.Operand, nodes.And, nodes.Or, nodes.Not, nodes.BinExpr,
    nodes.UnaryExpr, nodes.Test, nodes.Getitem,
)  # fmt: skip
ENV = jinja2.Environment(extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"])


def typed() -> dict[str, str]:
    """Every role variable whose spec says int or bool: {name: type}."""
    out = {}
    for role in ROLES:
        spec = yaml.safe_load((ROLES_DIR / role / "meta" / "argument_specs.yml").read_text())
        for name, opt in spec["argument_specs"]["main"]["options"].items():
            if opt.get("type") in ("int", "bool"):
                out[name] = opt["type"]
    return out


TYPED = typed()


def _parents(tree: nodes.Node) -> dict[int, nodes.Node]:
    out: dict[int, nodes.Node] = {}
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in node.iter_child_nodes():
            out[id(child)] = node
            stack.append(child)
    return out


def raw_uses(text: str, condition: bool) -> list[str]:
    """The typed variables `text` (a template; with `condition`, a bare condition) uses
    without converting them where they meet a comparison, a computation or a test."""
    source = "{{ " + text + " }}" if condition else text
    with warnings.catch_warnings():  # Jinja's lexer on a regex's backslashes in a literal
        warnings.simplefilter("ignore", DeprecationWarning)
        tree = ENV.parse(source)
    parents = _parents(tree)
    found = []
    for name in tree.find_all(nodes.Name):
        kind = TYPED.get(name.name)
        if kind is None or name.ctx != "load":
            continue
        node, parent = name, parents.get(id(name))
        ok = None
        while isinstance(parent, nodes.Filter) and parent.node is node:
            if parent.name in CONVERTS[kind] or parent.name in PRINTS:
                ok = True
                break
            if parent.name not in PASS_ON:
                ok = False
                break
            node, parent = parent, parents.get(id(parent))
        if ok is None:
            if isinstance(parent, nodes.Output):
                # Printed, or the whole value of a module's argument; a condition's result.
                ok = not (condition and parent is tree.body[0])
            elif isinstance(parent, nodes.If | nodes.CondExpr):
                ok = parent.test is not node
            else:
                ok = not isinstance(parent, JUDGES)
        if not ok:
            found.append(name.name)
    return found


def _strings(value, condition: bool):
    """(text, is a bare condition) of every string in a YAML value."""
    if isinstance(value, str):
        if condition or "{{" in value or "{%" in value:
            yield value, condition
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v, condition)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, condition or k in CONDITIONS)


def _task_strings(value):
    """Every template of a task list, with the assert module's `that` as conditions."""
    if isinstance(value, list):
        for v in value:
            yield from _task_strings(v)
        return
    if not isinstance(value, dict):
        yield from _strings(value, False)
        return
    for key, v in value.items():
        if key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _task_strings(v)
        elif key == "ansible.builtin.assert":
            for k, arg in v.items():
                yield from _strings(arg, k == "that")
        else:
            yield from _strings(v, key in CONDITIONS)


def sources() -> list[tuple[str, list[tuple[str, bool]]]]:
    out = []
    for role in ROLES:
        base = ROLES_DIR / role
        for path in sorted([*base.glob("tasks/*.yml"), *base.glob("handlers/*.yml")]):
            out.append((f"{role}/{path.parent.name}/{path.name}", list(_task_strings(_load(path)))))
        for path in sorted([*base.glob("vars/*.yml"), *base.glob("defaults/*.yml")]):
            out.append(
                (f"{role}/{path.parent.name}/{path.name}", list(_strings(_load(path), False)))
            )
        for path in sorted(base.glob("templates/*.j2")):
            out.append((f"{role}/templates/{path.name}", [(path.read_text(), False)]))
    out.append(("site.yml", list(_task_strings(_load(SITE)))))
    return out


def _load(path: Path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_the_check_finds_a_raw_comparison_and_accepts_a_converted_one():
    # The check itself, on the expressions the issue found and their fixes.
    assert raw_uses("{{ 'a' if nvme_raid_level == 1 else 'b' }}", False) == ["nvme_raid_level"]
    assert raw_uses("nvme_raid_chunk_kib >= 4", True) == ["nvme_raid_chunk_kib"]
    assert raw_uses("nvme_raid_allow_wipe and x", True) == ["nvme_raid_allow_wipe"]
    assert raw_uses("nvme_raid_allow_wipe", True) == ["nvme_raid_allow_wipe"]
    assert raw_uses("{{ nvme_raid_chunk_kib // 4 }}", False) == ["nvme_raid_chunk_kib"]
    assert raw_uses("{% if nvme_raid_allow_wipe %}x{% endif %}", False) == ["nvme_raid_allow_wipe"]
    for fine, condition in (
        ("{{ 'a' if nvme_raid_level | int == 1 else 'b' }}", False),
        ("nvme_raid_allow_wipe | default(false) | bool and x", True),
        ("{{ nvme_raid_level }}", False),  # a module's argument: its spec converts it
        ("{{ '--chunk=' ~ nvme_raid_chunk_kib ~ 'K' }}", False),
        ("{{ nvme_raid_levels[nvme_raid_level | string] }}", False),
        ("{{ nvme_raid_chunk_kib | to_json }}", False),
    ):
        assert raw_uses(fine, condition) == [], fine


@pytest.mark.parametrize(("where", "texts"), [pytest.param(w, t, id=w) for w, t in sources()])
def test_typed_variables_are_converted_where_they_are_compared(where, texts):
    raw = sorted({name for text, condition in texts for name in raw_uses(text, condition)})
    assert not raw, (
        f"{where}: {', '.join(f'{n} ({TYPED[n]})' for n in raw)} compared, computed or tested "
        "without `| int` / `| bool`: `-e name=value` makes it a string"
    )


def _probe(members: int, data_disks: int) -> dict:
    return {
        "members": [f"/dev/disk/by-id/nvme-{i}" for i in range(members)],
        "data_disks": data_disks,
        "array": {},
    }


def test_raid_1_from_the_command_line_is_built_as_raid_1():
    # `-e nvme_raid_level=1 -e nvme_raid_chunk_kib=256` arrive as strings, which the role's own
    # argument spec accepts ...
    given = {"nvme_raid_level": "1", "nvme_raid_chunk_kib": "256"}
    spec = yaml.safe_load((ROLES_DIR / "nvme_raid" / "meta" / "argument_specs.yml").read_text())
    keep = ("type", "elements", "choices", "default")
    options = {
        n: {k: v for k, v in o.items() if k in keep}
        for n, o in spec["argument_specs"]["main"]["options"].items()
    }
    checked = ArgumentSpecValidator(options).validate(given)
    # (Ansible's validation of a role's arguments converts a copy: the variable stays a string.)
    assert not checked.error_messages and checked.validated_parameters["nvme_raid_level"] == 1
    # ... so the role's own values see the strings: RAID 1, which has no stripe, gets no chunk
    # and no stripe alignment, as the integer 1 does.
    for level in ("1", 1):
        values = {**given, "nvme_raid_level": level, "_nvme_raid_probe": _probe(2, 1)}
        argv = render("nvme_raid", "_nvme_raid_create_argv", values, ["n1"])
        assert "--level=1" in argv and not [a for a in argv if a.startswith("--chunk")]
        assert render("nvme_raid", "_nvme_raid_mkfs_opts", values, ["n1"]).strip() == ""
    # RAID 0 from the command line is striped with the given chunk, XFS and ext4 alike.
    stripe = {**given, "nvme_raid_level": "0", "_nvme_raid_probe": _probe(4, 4)}
    argv = render("nvme_raid", "_nvme_raid_create_argv", stripe, ["n1"])
    assert "--chunk=256K" in argv
    assert render("nvme_raid", "_nvme_raid_mkfs_opts", stripe, ["n1"]).strip() == "-d su=256k,sw=4"
    ext4 = {**stripe, "nvme_raid_filesystem": "ext4"}
    opts = render("nvme_raid", "_nvme_raid_mkfs_opts", ext4, ["n1"]).strip()
    assert opts == "-E stride=64,stripe-width=256"


def test_the_chunk_size_check_takes_the_command_lines_string():
    tasks = _load(ROLES_DIR / "nvme_raid" / "tasks" / "preflight.yml")
    (check,) = [t for t in tasks if "chunk size" in t["name"]]
    for chunk, ok in (("512", True), (512, True), ("3", False), ("131072", False)):
        values = {"nvme_raid_chunk_kib": chunk}
        got = [
            render("nvme_raid", c, values, ["n1"]) for c in check["ansible.builtin.assert"]["that"]
        ]
        assert all(got) is ok, (chunk, got)
