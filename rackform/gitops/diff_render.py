"""`rackform diff` presented: a Markdown summary made to be posted as a pull-request comment (a
table per cluster, monthly and per-run cost old -> new and the difference, a total at the
bottom, red where a change deletes or replaces running nodes: the habit Infracost set) and the
same data as JSON for machines."""

from __future__ import annotations

import dataclasses
from typing import Any

from rackform.gitops.diff import BlueprintDiff, EnvDiff
from rackform.rollout.plan import duration

RED = "🔴"
STATUS = {"A": "new", "D": "deleted", "M": "modified", "R": "renamed"}
SIGN = {"create": "+", "update": "~", "replace": "-/+", "delete": "-"}
MAX_VALUE = 60


def usd(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    v = round(v, 2)  # float noise (a sum less its parts) reads as a cent at most
    if v == 0:
        v = 0.0  # never "-$0.00"
    text = f"${abs(v):,.0f}" if abs(v) >= 100 else f"${abs(v):,.2f}"
    if not signed:
        return text if v >= 0 else "-" + text
    return ("+" if v > 0 else "-" if v < 0 else "±") + text


def _cost_cell(c: dict[str, Any]) -> str:
    if c["old"] is None and c["new"] is None:
        return "-"
    return f"{usd(c['old'])} → {usd(c['new'])} ({usd(c['delta'], signed=True)})"


def _short(v: Any) -> str:
    text = "∅" if v is None else str(v)
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def _digest(d: str | None) -> str:
    return d.removeprefix("sha256:")[:12] if d else "∅"


def _serving(bd: BlueprintDiff) -> bool:
    """An inference blueprint's: its cost per million output tokens stands where a training
    blueprint's cost per run does."""
    return any(
        e.cost["tokens"]["old"] is not None or e.cost["tokens"]["new"] is not None
        for e in bd.environments
    )


def _env_rows(bd: BlueprintDiff) -> list[str]:
    serving = _serving(bd)
    last = "per million output tokens" if serving else "per run"
    rows = [
        f"| environment | digest | resources | findings | per month | {last} |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for e in bd.environments:
        ops = {op: sum(r["op"] == op for r in e.resources) for op in SIGN}
        res = " ".join(f"{SIGN[op]}{n}" for op, n in ops.items())
        if e.not_planned:
            res = e.not_planned
        if e.red:
            res = f"{RED} {res}"
        if e.promotion:
            res = f"{res}, promotion rule {e.promotion['change']}"
        if e.rollout and e.rollout["rolls"]:
            r = e.rollout
            res = f"{res}, rolling: {len(r['batches'])} batches, {duration(r['expected_minutes'])}"
        new = sum(f["change"] in ("appeared", "unwaived") for f in e.findings)
        gone = len(e.findings) - new
        rows.append(
            f"| {e.environment} ({e.status}) | {_digest(e.digest[0])} → {_digest(e.digest[1])}"
            f" | {res} | +{new} -{gone} | {_cost_cell(e.cost['month'])}"
            f" | {_cost_cell(e.cost['tokens' if serving else 'run'])} |"
        )
    return rows


def _env_details(e: EnvDiff) -> list[str]:
    if e.status == "unchanged":
        return []
    out = [f"<details><summary>{e.environment}: what changes</summary>", ""]
    if e.promotion:
        p = e.promotion
        out += [f"- ⚠️ promotion rule {p['change']}: {e.environment} {p['message']}", ""]
    if e.rollout:
        out += [*_rollout(e.rollout), ""]
    if e.fields:
        out += ["| field | old | new |", "| --- | --- | --- |"]
        out += [f"| `{f['field']}` | {_short(f['old'])} | {_short(f['new'])} |" for f in e.fields]
        out.append("")
    for r in e.resources:
        what = r.get("what", "running nodes")
        red = f" {RED} **{r['nodes']} {what}**" if r.get("nodes") else ""
        out.append(f"- `{SIGN[r['op']]}` `{r['urn']}`{red}{_why(r)}")
        for p in r["properties"]:
            out.append(f"  - `{p['property']}`: {_short(p['old'])} → {_short(p['new'])}")
    for f in e.findings:
        out.append(
            f"- finding {f['change']}: **{f['level']} {f['code']}** at `{f['path']}`: "
            f"{f['message']}"
        )
    return [*out, "", "</details>", ""]


def _rollout(r: dict[str, Any]) -> list[str]:
    """What a reviewer must know of a software change: whether running nodes are drained (and
    rebooted), in how many batches and how long, or that it applies in place."""
    if not r["rolls"]:
        order = f" ({' → '.join(r['slurm_order'])})" if r["slurm_order"] else ""
        return [f"- software: {r['why']}{order}"]
    size = r["batch_size"]
    first = ", a canary node first" if r["canary"] else ""
    out = [
        f"- 🔁 **rolling**: {len(r['batches'])} batches of up to {size}"
        f" node{'s' if size > 1 else ''}{first}, {duration(r['expected_minutes'])};"
        f" {r['why']} (roles: {', '.join(r['roles'])}; jobs: {r['jobs']})"
    ]
    shown = r["batches"][:5]
    out += [f"  - batch {i}: {', '.join(b)}" for i, b in enumerate(shown, 1)]
    if len(r["batches"]) > len(shown):
        out.append(f"  - … {len(r['batches']) - len(shown)} more batches")
    out.append(f"  - the time: {r['basis']}")
    return out


def _why(r: dict[str, Any]) -> str:
    """Why a resource is replaced (and whether it goes first), or why its nodes roll."""
    if r["op"] == "replace":
        first = "; deleted first, down until replaced" if r.get("delete_before_replace") else ""
        return f": replaced, {r['reason']}{first}"
    if r.get("rolls"):
        return f": {r['rolls']}"
    return ""


def markdown(diffs: list[BlueprintDiff], base: str, head: str) -> str:
    lines = [f"## rackform diff `{base}` → `{head}`", ""]
    if not diffs:
        return "\n".join([*lines, "No blueprint changed.", ""])
    month = run = 0.0
    priced = True
    for bd in diffs:
        moved = f", from `{bd.old_path}`" if bd.status == "R" else ""
        lines.append(f"### {bd.cluster or bd.path} (`{bd.path}`, {STATUS[bd.status]}{moved})")
        lines.append("")
        if bd.problems:
            lines += ["**Invalid blueprint:**", ""]
            lines += [f"- `{p}`" for p in bd.problems]
            lines.append("")
        if bd.environments:
            lines += [*_env_rows(bd), ""]
        for e in bd.environments:
            lines += _env_details(e)
            for key, total in (("month", "m"), ("run", "r")):
                delta = e.cost[key]["delta"]
                if delta is None and (e.cost[key]["old"], e.cost[key]["new"]) != (None, None):
                    priced = False
                elif delta is not None and total == "m":
                    month += delta
                elif delta is not None:
                    run += delta
    red = sum(len(e.red) for bd in diffs for e in bd.environments)
    lines.append(
        f"**Total: {usd(month, signed=True)} per month, {usd(run, signed=True)} per run**"
        + ("" if priced else " (some costs could not be priced)")
    )
    if red:
        lines.append(f"\n{RED} {red} change(s) delete or replace running nodes.")
    return "\n".join([*lines, ""])


def document(diffs: list[BlueprintDiff], base: str, head: str) -> dict[str, Any]:
    blueprints = []
    for bd in diffs:
        d = dataclasses.asdict(bd)
        for e, raw in zip(bd.environments, d["environments"], strict=True):
            raw["new_errors"] = len(e.new_errors)
            raw["replaces_or_deletes_nodes"] = len(e.red)
        blueprints.append(d)
    return {"base": base, "head": head, "blueprints": blueprints}
