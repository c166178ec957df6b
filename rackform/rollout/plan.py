"""A software change's rollout, offline: whether it rolls (a change that needs a drain or a
reboot, as `rollout.changes` classes it), the roles it touches, the batches in order (a canary node
first, then batches within one failure domain and no larger than the out-of-service budget) and
the expected time from the catalog's per-node minutes. `rackform diff` shows it for every
changed environment; a rolling `rackform configure` carries it out batch by batch."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rackform.blueprint.schema.rollout import RolloutPolicy, failure_domains
from rackform.blueprint.schema.sections import LifecycleSpec
from rackform.plan.inventory import configure_vars
from rackform.plan.model import Plan, thaw
from rackform.rollout.changes import ROLLING, SLURM_ORDER, Change, catalog, compare, worst
from rackform.rollout.measured import Measured

BASIS = "rackform's per-node estimates (rackform/catalog/rollout.yaml); no rolling run recorded yet"


@dataclass(frozen=True)
class Basis:
    """What one revision's plan contributes: the roles' variables of a configuration run, each
    node's own, the failure domains and the lifecycle's policy."""

    variables: Mapping[str, Any]
    nodes: Mapping[str, Mapping[str, Any]]
    domains: Mapping[str, Sequence[str]]
    lifecycle: LifecycleSpec
    # What the cluster's last rolling change measured (on the revision the nodes run): the
    # next rollout's estimate is made from it.
    measured: Measured | None = None


def basis(plan: Plan, extras: Mapping[str, Any] | None = None) -> Basis:
    """`extras`: --extra-vars over the blueprint's variables (what a configuration run
    applies with them)."""
    nodes = {
        h.name: {"nvme_raid_devices": list(h.nvme)} if h.nvme else {}
        for g in plan.node_groups
        for h in g.hosts
    }
    return Basis(
        {**thaw(configure_vars(plan.group_vars)), **(extras or {})},
        nodes,
        failure_domains(plan.node_groups),
        plan.lifecycle,
    )


def applied_basis(doc: Mapping[str, Any] | None, lifecycle: LifecycleSpec) -> Basis:
    """What the nodes run by the record of the last configuration that finished
    (`Store.applied`); with no record, nothing: every variable then counts as changed."""
    doc = doc or {}
    nodes = dict(doc.get("nodes") or {})
    return Basis(
        dict(doc.get("variables") or {}),
        nodes,
        {"applied": list(nodes)},
        lifecycle,
        Measured.from_json(doc.get("measured")),
    )


def applied_extras(plan: Plan, doc: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the last configuration that finished applied over the blueprint's variables (its
    `--extra-vars`, by its record `Store.applied`): a node's re-validation outside a
    configuration run (heal's) runs the smoke job as the nodes have it, the site's package
    mirror and job size included."""
    base = basis(plan).variables
    applied = dict((doc or {}).get("variables") or {})
    return {k: v for k, v in applied.items() if k not in base or base[k] != v}


def batches(domains: Mapping[str, Sequence[str]], size: int, canary: bool) -> list[list[str]]:
    """The batches in order: the first node alone (canary), then each failure domain's nodes in
    batches of at most `size`, never two domains in one batch."""
    out: list[list[str]] = []
    for i, nodes in enumerate(domains.values()):
        rest = list(nodes)
        if canary and i == 0 and rest:
            out.append(rest[:1])
            rest = rest[1:]
        out += [rest[j : j + size] for j in range(0, len(rest), size)]
    return out


@dataclass
class Rollout:
    rolls: bool
    cls: str  # the most disruptive class among the changes
    why: str
    changes: list[Change] = field(default_factory=list)
    batches: list[list[str]] = field(default_factory=list)
    budget: int = 0
    batch_size: int = 0
    slurm_order: list[str] = field(default_factory=list)
    minutes_per_batch: int = 0
    policy: RolloutPolicy = field(default_factory=RolloutPolicy)
    basis: str = BASIS  # what the expected time is made from

    @property
    def roles(self) -> list[str]:
        return sorted({c.role for c in self.changes if c.role and c.cls != "none"})

    @property
    def expected_minutes(self) -> int:
        return self.minutes_per_batch * len(self.batches)

    def as_json(self) -> dict[str, Any]:
        return {
            "rolls": self.rolls,
            "drain": self.cls in ROLLING,
            "reboot": self.cls == "reboot",
            "class": self.cls,
            "why": self.why,
            "roles": self.roles,
            "changes": [c.as_json() for c in self.changes],
            "budget": self.budget,
            "batch_size": self.batch_size,
            "canary": self.policy.canary and self.rolls,
            "jobs": self.policy.jobs,
            "batches": self.batches,
            "slurm_order": self.slurm_order,
            "expected_minutes": self.expected_minutes,
            "basis": self.basis,
        }


def duration(minutes: int) -> str:
    """'about 3 h 40 min', 'about 25 min'."""
    h, m = divmod(minutes, 60)
    return "about " + (f"{h} h {m} min" if h and m else f"{h} h" if h else f"{m} min")


def _why(cls: str, changes: list[Change], batches: int) -> str:
    named = ", ".join(sorted({c.variable for c in changes if c.cls == cls}))
    if cls == "reboot":
        return f"{named} needs each node drained and rebooted: rolled in {batches} batches"
    if cls == "drain":
        return f"{named} needs each node drained: rolled in {batches} batches"
    if cls == "slurm":
        return f"{named}: Slurm's daemons restart in Slurm's order; running jobs keep running"
    if cls == "in_place":
        return f"{named}: applied on every node at once; running jobs keep running"
    return "no change to what runs on the nodes" + (f" ({named}: validation only)" if named else "")


def rollout(old: Basis, new: Basis) -> Rollout:
    """The rollout of the change from `old` to `new`, under `new`'s policy, over the nodes both
    have (a node only `new` has joins; one only `old` has leaves); its time from what `old`'s
    last rolling change measured, else from the catalog."""
    changes = compare(old.variables, new.variables, old.nodes, new.nodes)
    cls = worst(changes)
    rolls = cls in ROLLING
    # The nodes the old revision has (a node only the new one has joins); with no record of
    # the old (the first rolling change), every node.
    known = {n for ns in old.domains.values() for n in ns}
    affected = _affected(known or {n for ns in new.domains.values() for n in ns}, changes)
    domains = {d: [n for n in ns if n in affected] for d, ns in new.domains.items()}
    domains = {d: ns for d, ns in domains.items() if ns}
    nodes = sum(len(ns) for ns in new.domains.values())
    allowed = new.lifecycle.budget(nodes)
    policy = new.lifecycle.rollout
    size = min(policy.batch_size or allowed, allowed)
    out = Rollout(rolls, cls, "", changes, budget=allowed, batch_size=size, policy=policy)
    if rolls:
        out.batches = batches(domains, size, policy.canary)
        out.minutes_per_batch = _minutes(out, old.measured)
        if old.measured is not None:
            out.basis = old.measured.describe()
    if any(c.cls == "slurm" for c in changes):
        daemons = SLURM_ORDER if new.variables.get("slurm_accounting") else SLURM_ORDER[1:]
        out.slurm_order = list(daemons)
    out.why = _why(cls, changes, len(out.batches))
    return out


def _affected(every: set[str], changes: list[Change]) -> set[str]:
    """The nodes a rolling change reaches: `every` node, or, where each change that needs a
    drain is a node's own (its drives), those nodes."""
    rolling = [c for c in changes if c.cls in ROLLING]
    if any(not c.nodes for c in rolling):
        return every
    return every & {n for c in rolling for n in c.nodes}


def _minutes(r: Rollout, measured: Measured | None = None) -> int:
    """One batch, start to end: its jobs checkpointed and requeued (or waited for), the changed
    roles' converges, a reboot where one is needed, and its re-validation; each from what the
    last rolling change measured where it measured it (`rollout.measured`), else the catalog's."""
    c = catalog()
    pace: dict[str, float] = {}  # minutes per catalog minute, where measured (else 1)
    requeue, validate = float(c.requeue), float(c.validate)
    if measured is not None:
        ran = list(measured.roles or c.converge) + (["reboot"] if measured.cls == "reboot" else [])
        weight = sum(c.converge.get(p, 0) for p in ran) + (c.reboot if "reboot" in ran else 0)
        if weight:
            pace |= {p: measured.apply_s / 60 / weight for p in ran}
        requeue, validate = measured.drain_s / 60, measured.validate_s / 60
    drain = requeue if r.policy.jobs == "requeue" else r.policy.wait_minutes
    converge = sum(c.converge.get(role, 0) * pace.get(role, 1.0) for role in r.roles)
    reboot = c.reboot * pace.get("reboot", 1.0) if r.cls == "reboot" else 0
    return max(1, math.ceil(drain + converge + reboot + validate))
