"""The text form of `rackform plan`: the resource tree with each resource's key inputs, runs of
identical siblings (a node group's instances) folded into one line, then the count per type."""

from __future__ import annotations

import re
import shutil
import textwrap
from typing import Any

# Inputs that are bulk, not decisions: left out of the one-line summary (still in --json).
QUIET = {"tags", "tagSpecifications", "description", "assumeRolePolicy", "group_vars", "__provider"}
MAX_VALUE = 48
_TAIL_NUMBER = re.compile(r"^(.*?)(\d+)$")


def _short(value: Any) -> str:
    if isinstance(value, dict):
        inner = ", ".join(f"{k}: {_short(v)}" for k, v in value.items())
        text = "{" + inner + "}"
    elif isinstance(value, list):
        text = (
            f"[{len(value)} items]" if len(value) > 3 else "[" + ", ".join(map(_short, value)) + "]"
        )
    else:
        text = str(value)
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 3] + "..."


def _rules(rules: list[dict]) -> str:
    out = []
    for r in rules:
        what = "all" if r.get("protocol") == "-1" else f"{r.get('protocol')}/{r.get('fromPort')}"
        sources = (
            (["self"] if r.get("self") else [])
            + r.get("cidrBlocks", [])
            + r.get("ipv6CidrBlocks", [])
            + r.get("securityGroups", [])
        )
        out.append(f"{what} {','.join(sources)}")
    return "; ".join(out)


def _interfaces(nics: list[dict]) -> str:
    kinds: dict[str, int] = {}
    for n in nics:
        kinds[n.get("interfaceType", "interface")] = (
            kinds.get(n.get("interfaceType", "interface"), 0) + 1
        )
    return f"{len(nics)} ({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))})"


def option_parts(resource: dict[str, Any]) -> list[str]:
    """The options that change how an update reaches the resource, where set."""
    o = resource.get("options") or {}
    parts = []
    if o.get("delete_before_replace"):
        parts.append("[delete-before-replace]")
    if o.get("ignore_changes"):
        parts.append(f"[ignore_changes: {', '.join(o['ignore_changes'])}]")
    if o.get("replace_on_changes"):
        parts.append(f"[replace_on_changes: {', '.join(o['replace_on_changes'])}]")
    return parts


def summary(resource: dict[str, Any]) -> str:
    """One line of the resource's inputs that say what it is, then its replacement options."""
    inputs = resource["inputs"]
    parts = option_parts(resource)
    for key, value in inputs.items():
        if key in QUIET or value is None or value == [] or value == {}:
            continue
        if key in ("ingress", "egress") and isinstance(value, list):
            parts.append(f"{key}=[{_rules(value)}]")
        elif key == "networkInterfaces" and isinstance(value, list):
            parts.append(f"networkInterfaces={_interfaces(value)}")
        elif key == "inventory" and isinstance(value, dict):
            parts.append("inventory=(hosts)")
        else:
            parts.append(f"{key}={_short(value)}")
    return "  ".join(parts)


def _fold(rows: list[tuple[int, dict, str]]) -> list[tuple[int, str, str, str]]:
    """(depth, type, name, summary) lines; three or more consecutive siblings of one type named
    PREFIX<n> with equal summaries (apart from their own name) become PREFIX{a..b} (count)."""
    out: list[tuple[int, str, str, str]] = []
    i = 0
    while i < len(rows):
        depth, res, text = rows[i]
        m = _TAIL_NUMBER.match(res["name"])
        j = i + 1
        if m:
            prefix = m.group(1)
            while j < len(rows):
                d2, r2, t2 = rows[j]
                m2 = _TAIL_NUMBER.match(r2["name"])
                if not (
                    d2 == depth
                    and r2["type"] == res["type"]
                    and r2["parent"] == res["parent"]
                    and m2
                    and m2.group(1) == prefix
                    and t2.replace(r2["name"], "") == text.replace(res["name"], "")
                ):
                    break
                j += 1
        if m and j - i >= 3:
            last = _TAIL_NUMBER.match(rows[j - 1][1]["name"]).group(2)
            name = f"{m.group(1)}{{{m.group(2)}..{last}}} ({j - i})"
            out.append((depth, res["type"], name, text.replace(res["name"], "<name>")))
            i = j
        else:
            out.append((depth, res["type"], res["name"], text))
            i += 1
    return out


def _wrapped(head: str, text: str, indent: int, width: int) -> list[str]:
    """`head` then the inputs (`text`, separated by two spaces), packed into lines of at most
    `width` characters; an input never splits, the continuation lines sit under the name."""
    lines, line = [], head
    pad = " " * (indent + 4)
    for part in text.split("  ") if text else []:
        if len(line) + 2 + len(part) <= width or line.strip() == "":
            line = f"{line}  {part}" if line.strip() else f"{pad}{part}"
        else:
            lines.append(line)
            line = f"{pad}{part}"
    lines.append(line)
    return lines


def render_text(doc: dict[str, Any], width: int | None = None) -> str:
    """The plan as text, each line at most `width` characters (default: the terminal's, or 100
    when the output is not a terminal) unless one input alone is longer."""
    width = width or shutil.get_terminal_size((100, 24)).columns
    resources = doc["resources"]
    lines = [
        f"Plan for {doc['blueprint']} (environment {doc['environment']}, stack {doc['stack']})",
        f"digest {doc['digest']}",
        "protected: every resource (lifecycle.protect: true); destroy refuses"
        if doc.get("protected")
        else "protected: no",
        "",
    ]
    data = doc.get("data")
    if data:
        head = (
            f"Data tier: stack {data['stack']}, brought up first; every resource protected, and "
            "`rackform destroy` (and reap's) leave it: only `rackform destroy --data` deletes "
            "it, the file system's data with it"
        )
        lines += [*textwrap.wrap(head, width, subsequent_indent="  "), ""]
        lines += _tree(data["resources"], width)
        lines += ["", *_counts(data["resources"], data["counts"], "Data tier's resources by type:")]
        lines += ["", f"Cluster: stack {doc['stack']}, reading the data tier's ids", ""]
    lines += _tree(resources, width)
    rollout = doc.get("rollout")
    if rollout:
        lines += ["", f"Rollout: {rollout['strategy']} ({rollout['why']}): {rollout['downtime']}"]
    conf = doc.get("configuration") or {}
    if conf.get("groups"):
        head = (
            f"Configuration (one node's converge {conf['node_converge_s']:,} s, measured on the "
            "testbed's emulated VMs: an upper bound for real hosts):"
        )
        lines += ["", *textwrap.wrap(head, width, subsequent_indent="  ")]
        for c in conf["groups"]:
            text = f"  {c['group']}: {configuring_line(c)}"
            lines += textwrap.wrap(text, width, subsequent_indent="      ")
    lines += ["", *_counts(resources, doc["counts"], "Resources by type:")]
    return "\n".join(lines) + "\n"


def _tree(resources: list[dict[str, Any]], width: int) -> list[str]:
    depth: dict[str | None, int] = {None: -1}
    rows = []
    for r in resources:
        d = depth.get(r["parent"], -1) + 1
        depth[r["name"]] = d
        rows.append((d, r, summary(r)))
    lines: list[str] = []
    for d, typ, name, text in _fold(rows):
        lines += _wrapped(f"{'  ' * d}{typ}  {name}", text, 2 * d, width)
    return lines


def _counts(resources: list[dict[str, Any]], counts: dict[str, int], head: str) -> list[str]:
    lines = [head]
    width = len(str(len(resources)))
    lines += [f"  {n:>{width}}  {t}" for t, n in counts.items()]
    components = sum(1 for r in resources if not r["custom"])
    lines.append(
        f"  {len(resources):>{width}}  in all ({len(resources) - components} resources, "
        f"{components} components)"
    )
    return lines


def configuring_line(c: dict) -> str:
    """One node group's configuration, in words."""
    minutes = f"about {round(c['expected_s'] / 60)} min"
    if c["how"] == "boot":
        image = " (a baked node image: its roles skipped)" if c.get("baked") else ""
        return (
            f"{c['nodes']} node(s), each configures itself at first boot from its pinned "
            f"artifact{image}, all at once: {minutes} after boot, whatever the count"
        )
    bound = f" ({c['why']})" if c["why"] else ""
    return (
        f"{c['nodes']} node(s), pushed from the controller over SSH, {c['at_once']} at a "
        f"time{bound}: {c['rounds']} round(s), {minutes}"
    )
