"""What `pulumi up` would do to each resource when one offline plan follows another: create,
update, replace or delete, and why, with the provider's own rules (which inputs force a new
resource: each target compiler's `replace_rules`) and each
resource's options (ignore_changes, replace_on_changes, delete_before_replace).

Under Pulumi's mocks an output the engine learns only after `up` is a placeholder naming its
resource (`<subnet>.id`, `<template>.latestVersion`: `offline.RecordingMocks`), identical in
both plans. A real engine gives a replaced resource a new id, and a launch template a new
version when what it launches changes: the placeholders that name such a resource are read as
changed here, so the change travels to every input that refers to it (a new zone replaces the
subnet, which replaces the Instance Connect Endpoint and makes a new template version, which
replaces each training instance).
"""

from __future__ import annotations

import re
from typing import Any

from rackform.plan.targets.compilers import COMPILERS
from rackform.plan.targets.replace_rules import ReplaceRules


def _rules() -> ReplaceRules:
    """Every target's rules together (resource types do not overlap between targets)."""
    every = [c.replace_rules() for c in COMPILERS.values()]
    return ReplaceRules(
        {t: p for r in every for t, p in r.replaced_by.items()},
        {t: v for r in every for t, v in r.versioned.items()},
        {t: v for r in every for t, v in r.rolls.items()},
    )


RULES = _rules()
_REF = re.compile(r"<([^<>]+)>\.([A-Za-z]+)")
MAX_VALUE = 60


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaves; items of a list of named mappings are keyed by name."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and value:
        named = all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in value)
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{v['name'] if named else i}]"))
        return out
    return {prefix: value}


def top(path: str) -> str:
    return path.split(".")[0].split("[")[0]


def ignored(path: str, ignore: list[str]) -> bool:
    """Whether `ignore_changes` drops a change to `path` (Pulumi's property paths)."""
    return any(path == i or path.startswith((i + ".", i + "[")) for i in ignore)


def _short(v: Any) -> str:
    text = "∅" if v is None else str(v)
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


class _Changed:
    """What a resource's step changes for the resources that refer to it."""

    def __init__(self, attrs: frozenset[str] | None, why: str):
        self.attrs = attrs  # None: every output (a replacement gives a new id)
        self.why = why

    def covers(self, attr: str) -> bool:
        return self.attrs is None or attr in self.attrs


def _references(inputs: dict, changed: dict[str, _Changed]) -> list[dict[str, Any]]:
    """Input leaves naming an output of a resource whose step changes it."""
    out = []
    for path, value in flatten(inputs).items():
        if not isinstance(value, str):
            continue
        for name, attr in _REF.findall(value):
            c = changed.get(name)
            if c is not None and c.covers(attr):
                new = f"(after up: {c.why})"
                out.append({"property": path, "old": value, "new": new, "via": name})
                break
    return out


def _direct(old: dict, new: dict, ignore: list[str]) -> list[dict[str, Any]]:
    a, b = flatten(old), flatten(new)
    return [
        {"property": k, "old": a.get(k), "new": b.get(k)}
        for k in sorted(a.keys() | b.keys())
        if a.get(k) != b.get(k) and not ignored(k, ignore)
    ]


def _why(p: dict[str, Any]) -> str:
    if "via" in p:
        return f"{p['property']}: {p['new'].removeprefix('(after up: ').removesuffix(')')}"
    return f"{p['property']}: {_short(p['old'])} → {_short(p['new'])}"


def _step(name: str, o: dict, n: dict, changed: dict[str, _Changed]) -> dict[str, Any] | None:
    """This resource's step, given the steps found so far (`changed`, which it extends when
    its own step changes what others refer to: a new id, a new version)."""
    options = n.get("options", {})
    ignore = options.get("ignore_changes", [])
    props = _direct(o["inputs"], n["inputs"], ignore)
    seen = {p["property"] for p in props}
    props += [p for p in _references(n["inputs"], changed) if p["property"] not in seen]
    if not props:
        return None
    rules = RULES.replaced_by.get(n["type"], {})
    forcing = set(options.get("replace_on_changes", []))
    replacing = [p for p in props if top(p["property"]) in rules or top(p["property"]) in forcing]
    step: dict[str, Any] = {"op": "update", "properties": props}
    if replacing:
        p = replacing[0]
        source = rules.get(top(p["property"]), "replace_on_changes")
        step.update(op="replace", reason=f"{_why(p)} forces a new resource", rule=source)
        step["delete_before_replace"] = bool(options.get("delete_before_replace"))
        if n.get("custom", True):
            changed[name] = _Changed(None, f"{name} replaced")
        return step
    if n["type"] in RULES.versioned:
        attr, not_versioned = RULES.versioned[n["type"]]
        versioning = [p for p in props if top(p["property"]) not in not_versioned]
        if versioning:
            why = f"new version of {name} ({_why(versioning[0])})"
            step["reason"] = why
            changed[name] = _Changed(frozenset({attr}), why)
    rolling = [p for p in props if top(p["property"]) in RULES.rolls.get(n["type"], ())]
    if rolling:
        step["rolls"] = f"instance refresh replaces every instance ({_why(rolling[0])})"
    return step


def steps(old: dict[str, dict], new: dict[str, dict]) -> dict[str, dict[str, Any]]:
    """urn -> {"op": create|update|replace|delete, "properties", and for replace "reason" and
    "delete_before_replace", for an update that rolls a group's instances "rolls"}. Resources
    as `rackform plan --json` lists them, keyed by URN: {"type", "custom", "inputs",
    "options"}. Unchanged resources are left out."""
    out: dict[str, dict[str, Any]] = {}
    for urn in old.keys() - new.keys():
        out[urn] = {"op": "delete", "properties": []}
    for urn in new.keys() - old.keys():
        out[urn] = {"op": "create", "properties": []}
    changed: dict[str, _Changed] = {}
    # A change travels along references; each pass settles at least one more resource, so
    # as many passes as resources reach the fixed point.
    for _ in range(len(new) + 1):
        before = {k: (v.attrs, v.why) for k, v in changed.items()}
        for urn in sorted(old.keys() & new.keys()):
            s = _step(urn.rsplit("::", 1)[-1], old[urn], new[urn], changed)
            if s is not None:
                out[urn] = s
        if {k: (v.attrs, v.why) for k, v in changed.items()} == before:
            break
    return {u: out[u] for u in sorted(out)}
