"""What a change to the roles' variables does to nodes that run jobs: each variable's class
from the catalog's rollout.yaml (reboot, drain, slurm, in_place, none), compared between
two revisions' variables (`Plan.group_vars`) and each node's own (its checkpoint drives)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from rackform.catalog import CatalogError, _read
from rackform.plan.model import thaw
from rackform.push.site import site_playbook

# Most to least disruptive: a change's class is that of its most disruptive variable.
CLASSES = ("reboot", "drain", "slurm", "in_place", "none")
# The classes a change rolls for: each batch drained (and rebooted) in turn.
ROLLING = ("reboot", "drain")
# Every role whose variables the plan sets: the site playbook's, and the bootstrap before them.
ROLES = ("host_bootstrap", *site_playbook().roles)
# Slurm's upgrade order (https://slurm.schedmd.com/upgrades.html): the database daemon first,
# then the controller, then the node daemons; each older daemon talks to a newer one, never
# the other way round.
SLURM_ORDER = ("slurmdbd", "slurmctld", "slurmd")


@dataclass(frozen=True)
class Catalog:
    variables: Mapping[str, str]
    converge: Mapping[str, int]  # role -> minutes on one node
    reboot: int
    requeue: int
    validate: int


@cache
def catalog() -> Catalog:
    doc = _read("rollout.yaml")
    variables = doc.get("variables") or {}
    for name, cls in variables.items():
        if cls not in CLASSES:
            raise CatalogError(f"rollout.yaml: {name}: unknown class {cls!r}")
        if role_of(name) is None and not name.startswith("rackform_"):
            raise CatalogError(f"rollout.yaml: {name}: no role's variable")
    m = doc["minutes"]
    return Catalog(variables, m["converge"], m["reboot"], m["requeue"], m["validate"])


def role_of(variable: str) -> str | None:
    """The role a variable belongs to (`<role>_<var>`); None for rackform's own labels."""
    return next(
        (r for r in sorted(ROLES, key=len, reverse=True) if variable.startswith(r + "_")), None
    )


@dataclass(frozen=True)
class Change:
    variable: str
    cls: str
    old: Any
    new: Any
    nodes: tuple[str, ...] = ()  # empty: every node; else only these (a node's own variable)

    @property
    def role(self) -> str | None:
        return role_of(self.variable)

    def as_json(self) -> dict[str, Any]:
        out = {"variable": self.variable, "class": self.cls, "role": self.role}
        return {**out, "nodes": list(self.nodes)} if self.nodes else out


def classify(variable: str) -> str:
    """A variable's class; one the catalog does not name drains (the safe side) until it does."""
    return catalog().variables.get(variable, "drain")


def compare(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    old_nodes: Mapping[str, Mapping[str, Any]] | None = None,
    new_nodes: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Change]:
    """Every variable whose value differs, cluster-wide (`old`, `new`) and per node present at
    both revisions (`*_nodes`: node -> its own variables, which win over the cluster's)."""
    out = [
        Change(k, classify(k), thaw(old.get(k)), thaw(new.get(k)))
        for k in sorted(old.keys() | new.keys())
        if thaw(old.get(k)) != thaw(new.get(k))
    ]
    old_nodes, new_nodes = old_nodes or {}, new_nodes or {}
    changed = {c.variable for c in out}
    per: dict[str, list[str]] = {}
    for node in sorted(old_nodes.keys() & new_nodes.keys()):
        a, b = old_nodes[node], new_nodes[node]
        for k in sorted(a.keys() | b.keys()):
            if k not in changed and a.get(k, old.get(k)) != b.get(k, new.get(k)):
                per.setdefault(k, []).append(node)
    out += [Change(k, classify(k), None, None, tuple(ns)) for k, ns in sorted(per.items())]
    return out


def worst(changes: list[Change]) -> str:
    """The most disruptive class among `changes` ('none' for no change)."""
    return min((c.cls for c in changes), key=CLASSES.index, default="none")
