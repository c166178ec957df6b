"""Slurm's hostlist expressions as node names: `node[1-3,7],gpu-a[01-02],login`, ranges keep
their zero padding, several bracket groups in one name multiply (`r[1-2]n[1-2]`)."""

from __future__ import annotations

import re

_GROUP = re.compile(r"\[([^\[\]]*)\]")


class HostlistError(ValueError):
    pass


def _split(expr: str) -> list[str]:
    """Top-level comma-separated parts (commas inside brackets belong to their range)."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(expr):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {expr!r}")
        elif c == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"unbalanced '[' in {expr!r}")
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def _range(body: str, expr: str) -> list[str]:
    out = []
    for item in body.split(","):
        lo, sep, hi = item.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(f"{item!r} is not a number or range in {expr!r}")
        if not sep:
            out.append(lo)
            continue
        width = len(lo) if lo.startswith("0") else 0
        out += [str(n).zfill(width) for n in range(int(lo), int(hi) + 1)]
    return out


def _one(name: str, expr: str) -> list[str]:
    m = _GROUP.search(name)
    if m is None:
        return [name]
    head, tail = name[: m.start()], name[m.end() :]
    return [head + n + rest for n in _range(m.group(1), expr) for rest in _one(tail, expr)]


def expand(expr: str) -> list[str]:
    """Every node name the expression names, in its order; '' and '(null)' name none."""
    expr = expr.strip()
    if expr in ("", "(null)", "None", "None assigned", "Unknown"):
        return []
    return [n for part in _split(expr) for n in _one(part, expr)]
