"""What a pull request changes, blueprint by blueprint and environment by environment: the
effective fields, the resources of the offline plan by URN (the program `rackform plan` runs,
under Pulumi's mocks), the preflight findings that appeared or went away, and the cost delta.

Only blueprints whose file changed between the two revisions are compiled and planned: a
repository of fifty clusters where a PR touches five plans five (twice: base and head). Each
revision's file is compiled by the engine (`prepare_all`) from a temporary copy, so nothing is
checked out and the working tree is never touched.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rackform.blueprint.problems import BlueprintError
from rackform.engine import Prepared, prepare_all
from rackform.evidence import pin as pins
from rackform.gitops.gitrev import Change, changes, show
from rackform.plan.cost import cluster_usd_per_million
from rackform.plan.model import Plan
from rackform.plan.slurm import CONTROLLER_TAG
from rackform.plan.targets.compilers import COMPILERS
from rackform.rollout.measured import Measured
from rackform.rollout.plan import Basis, basis, rollout
from rackform.targets.runtimes import runtime

# A stack's name -> what its last rolling change measured (`rollout.measured`).
Timings = Callable[[str], Measured | None]

# Resources that are running nodes, as each target's runtime names them: deleting or replacing
# one (or an update that rolls a group's instances) is shown red, with the reason
# (`stack.replacement`).
NODE_TYPES = frozenset(t for c in COMPILERS.values() for t in c.node_types)


@dataclass
class Side:
    """One environment of one blueprint at one revision."""

    digest: str
    fields: dict[str, Any]
    resources: dict[str, dict[str, Any]]  # urn -> {"type", "custom", "inputs", "options"}
    findings: dict[str, dict[str, Any]]  # "level code path" -> finding as JSON
    month: float | None
    run: float | None
    planned: bool = True  # False: an unwaived preflight error kept the program from running
    promoted_from: str | None = None  # the promotion rule into this environment, if any
    nodes: Basis | None = None  # what a software change's rollout reads (`rackform.rollout`)
    stack: str = ""  # the stack it deploys (its rollout record's name)
    # An inference cluster's cost per million output tokens on paper (None: not serving, or
    # not priced).
    tokens: float | None = None


@dataclass
class EnvDiff:
    environment: str
    status: str  # added | deleted | changed | unchanged
    digest: tuple[str | None, str | None]
    fields: list[dict[str, Any]] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    cost: dict[str, Any] = field(default_factory=dict)
    not_planned: str = ""  # why resources were not compared
    # A promotion rule into this environment added, removed or re-pointed: who may deploy it,
    # so always a finding, though no digest of the environment changes with it.
    promotion: dict[str, Any] | None = None
    # How a change to the nodes' software reaches running nodes: rolled batch by batch, in
    # place, or not at all (`Rollout.as_json`); None where the environment is new or deleted.
    rollout: dict[str, Any] | None = None

    @property
    def new_errors(self) -> list[dict[str, Any]]:
        return [
            f
            for f in self.findings
            if f["change"] == "appeared" and f["level"] == "error" and not f["waived"]
        ]

    @property
    def red(self) -> list[dict[str, Any]]:
        """Resources whose change deletes or replaces running nodes."""
        return [r for r in self.resources if r.get("nodes")]


@dataclass
class BlueprintDiff:
    path: str
    status: str  # A, D, M, R
    old_path: str | None
    cluster: str
    environments: list[EnvDiff] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # invalid at one of the revisions


def side_of(p: Prepared, shown: str, rules: dict[str, str]) -> Side:
    """`shown`: how findings name the file (PATH@REV, not the temporary copy)."""
    from rackform.stack.offline import record_stacks  # Pulumi only when something is planned
    from rackform.stack.replacement import flatten

    plan = p.plan
    resources = {}
    if not p.blocked:
        # Every stack's (the data tier's own, where it has one, then the cluster's): a URN
        # names its stack, so they never collide.
        resources = {
            r.urn: {"type": r.type, "custom": r.custom, "inputs": r.inputs, "options": r.options}
            for _, records in record_stacks(plan, runtime(plan.target_type))
            for r in records
        }
    findings = {}
    for lf in p.report.findings:
        d = {**lf.as_dict(), "file": shown}
        findings[f"{d['level']} {d['code']} {d['path']}"] = d
    cost = p.report.cost
    return Side(
        plan.digest,
        flatten(plan.effective.blueprint.model_dump(mode="json", exclude={"environments"})),
        resources,
        findings,
        cost.usd_per_month,
        _run_usd(plan, cost),
        not p.blocked,
        rules.get(plan.environment),
        basis(plan),
        plan.stack,
        cluster_usd_per_million(cost.tokens, {g.name: g.count for g in plan.node_groups}),
    )


def _run_usd(plan: Plan, cost) -> float | None:
    """A training run's cost at the target utilization, where the workload gives one."""
    if cost.run is None:
        return None
    target = plan.figures.utilization.target_fraction.value * 100
    at = [a for a in cost.run.at if abs(a.utilization_pct - target) < 1e-9] or list(cost.run.at)
    return at[0].usd if at else None


def _touches_nodes(rtype: str, step: dict[str, Any]) -> str | None:
    if rtype not in NODE_TYPES:
        return None
    if step["op"] == "delete":
        return "deletes"
    if step["op"] == "replace" or step.get("rolls"):
        return "replaces"
    return None


def compare_resources(old: dict, new: dict) -> list[dict[str, Any]]:
    """Each resource `pulumi up` would create, update, replace or delete, by the provider's
    rules (`rackform.stack.replacement.steps`); those that delete or replace running nodes
    carry `nodes` and the reason."""
    from rackform.stack.replacement import steps

    out = []
    for urn, step in steps(old, new).items():
        rtype = (new.get(urn) or old[urn])["type"]
        entry = {"op": step["op"], "urn": urn, "type": rtype, "properties": step["properties"]}
        for key in ("reason", "rule", "delete_before_replace", "rolls"):
            if key in step:
                entry[key] = step[key]
        nodes = _touches_nodes(rtype, step)
        if nodes:
            entry["nodes"] = nodes
            # Slurm's controller instance (AWS) is no node, but replacing it takes the queue
            # it holds (its state is on its root volume): red too, named for what it is.
            tags = ((new.get(urn) or old[urn])["inputs"].get("tags")) or {}
            if isinstance(tags, dict) and tags.get(CONTROLLER_TAG[0]) == CONTROLLER_TAG[1]:
                entry["what"] = "Slurm's controller and its queue"
        out.append(entry)
    return out


def compare_findings(old: dict, new: dict) -> list[dict[str, Any]]:
    out = []
    for key in sorted(old.keys() | new.keys()):
        if key in old and key in new and old[key]["waived"] == new[key]["waived"]:
            continue
        change = "appeared" if key not in old else "went away" if key not in new else "waived"
        f = new.get(key) or old[key]
        if change == "waived" and not new[key]["waived"]:
            change = "unwaived"
        out.append({"change": change, **f})
    return out


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def compare_env(
    env: str, old: Side | None, new: Side | None, timings: Timings | None = None
) -> EnvDiff:
    """`timings`: what a stack's last rolling change measured (its rollout's time is then
    estimated from it), or None for the catalog's minutes."""
    status = "added" if old is None else "deleted" if new is None else "changed"
    empty = Side("", {}, {}, {}, None, None)
    o, n = old or empty, new or empty
    fields = [
        {"field": k, "old": o.fields.get(k), "new": n.fields.get(k)}
        for k in sorted(o.fields.keys() | n.fields.keys())
        if o.fields.get(k) != n.fields.get(k)
    ]
    d = EnvDiff(
        env,
        status,
        (old.digest if old else None, new.digest if new else None),
        fields if old and new else [],
        compare_resources(o.resources, n.resources) if o.planned and n.planned else [],
        compare_findings(o.findings, n.findings),
        {
            "month": {"old": o.month, "new": n.month, "delta": _delta(o.month, n.month)},
            "run": {"old": o.run, "new": n.run, "delta": _delta(o.run, n.run)},
            "tokens": {"old": o.tokens, "new": n.tokens, "delta": _delta(o.tokens, n.tokens)},
        },
    )
    if not (o.planned and n.planned):
        which = " and ".join(w for w, s in (("base", o), ("head", n)) if not s.planned)
        d.not_planned = f"not planned at {which}: unwaived preflight errors"
    if old and new and o.nodes and n.nodes:
        measured = timings(o.stack) if timings else None
        r = rollout(replace(o.nodes, measured=measured) if measured else o.nodes, n.nodes)
        d.rollout = r.as_json() if any(c.cls != "none" for c in r.changes) else None
    if o.promoted_from != n.promoted_from and (old and new):
        d.promotion = _rule_change(o.promoted_from, n.promoted_from)
    quiet = not d.resources and not d.findings and d.promotion is None and not d.rollout
    if status == "changed" and o.digest == n.digest and quiet:
        d.status = "unchanged"
    if old is None:  # a new cluster: every cost is added
        d.cost["month"]["delta"], d.cost["run"]["delta"] = n.month, n.run
        d.cost["tokens"]["delta"] = n.tokens
    if new is None:
        d.cost["month"]["delta"] = None if o.month is None else -o.month
        d.cost["run"]["delta"] = None if o.run is None else -o.run
        d.cost["tokens"]["delta"] = None if o.tokens is None else -o.tokens
    return d


def _rule_change(old: str | None, new: str | None) -> dict[str, Any]:
    if old is None:
        what = f"now only by promotion from {new}"
    elif new is None:
        what = f"no longer gated: deployed without a promotion from {old}"
    else:
        what = f"promoted from {new} instead of {old}"
    change = "added" if old is None else "removed" if new is None else "re-pointed"
    return {"change": change, "old": old, "new": new, "message": what}


def _sides(
    repo: Path, commit: str, path: str, label: str, scratch: Path
) -> tuple[dict[str, Side], str, list[str]]:
    """Every environment of the file at `commit`: (env -> Side, cluster name, problems)."""
    copy = scratch / path
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_bytes(show(repo, commit, path))
    try:
        prepared = prepare_all(copy)
    except BlueprintError as exc:
        return {}, "", [str(p).replace(str(copy), f"{path}@{label}") for p in exc.problems]
    finally:
        copy.unlink()
    declared = pins.rules(prepared[0].plan)  # the file's rules, the same in every environment
    sides = {p.plan.environment: side_of(p, f"{path}@{label}", declared) for p in prepared}
    return sides, prepared[0].plan.name, []


def diff_change(
    repo: Path,
    change: Change,
    base: str,
    head: str,
    labels=("base", "head"),
    timings: Timings | None = None,
):
    with tempfile.TemporaryDirectory(prefix="rackform-diff-") as d:
        scratch = Path(d)
        old, new, problems, name = {}, {}, [], ""
        if change.old:
            old, name, problems = _sides(repo, base, change.old, labels[0], scratch)
        if change.new:
            new, head_name, more = _sides(repo, head, change.new, labels[1], scratch)
            name, problems = head_name or name, problems + more
    bd = BlueprintDiff(change.path, change.status, change.old, name, problems=problems)
    if problems and ((change.old and not old) or (change.new and not new)):
        # Invalid at one revision: nothing to compare against; the problems say which.
        return bd
    for env in sorted(old.keys() | new.keys(), key=lambda e: (e != "default", e)):
        bd.environments.append(compare_env(env, old.get(env), new.get(env), timings))
    return bd


def diff(
    repo: Path,
    base: str,
    head: str,
    paths: list[str],
    labels=("base", "head"),
    timings: Timings | None = None,
):
    """Every changed blueprint under `paths` between the two commits."""
    return [
        diff_change(repo, c, base, head, labels, timings) for c in changes(repo, base, head, paths)
    ]
