"""How each node group gets its configuration, and about how long that takes: what `rackform
plan` says before anything is bought, from the catalog's measured figures (`configure` in
the catalog's preflight.yaml).

- push: the controller runs the roles over SSH (Ansible). Every pushed node of the cluster is
  in one run, `width` at a time: one per node, but no more connections than an EC2 Instance
  Connect Endpoint carries where the inventory tunnels through one (`rackform_ssh_proxy`), and
  at run time no more forks than half the controller's available memory holds (unknown here).
  Nodes converge side by side, so a run takes about one node's converge per round of `width`
  (where the cluster is wider, the GPU roles go through it in batches of about `width`).
- boot: each node configures itself at first boot from its pinned artifact, side by side with
  every other, so the group takes about one node's converge whatever its size; from a baked
  node image (`image.bake`), only its own part (the image's roles skipped): the baked figure.

The per-node figure was measured on the testbed's emulated VMs: an upper bound for real hosts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rackform.catalog.preflight import ConfigureFigures
from rackform.plan.model import Plan


@dataclass(frozen=True)
class Configuring:
    """One node group's configuration as planned."""

    group: str
    nodes: int
    how: str  # push | boot
    width: int  # nodes configured at once (push: the run's forks; boot: every node)
    rounds: int
    expected_s: float
    why: str  # what bounds the width, where anything does
    per_node_s: float = 0.0  # one node's time the expectation is made of
    baked: bool = False  # from a baked node image, the image's roles skipped

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "nodes": self.nodes,
            "how": self.how,
            "at_once": self.width,
            "rounds": self.rounds,
            "expected_s": self.expected_s,
            "per_node_s": self.per_node_s,
            "baked": self.baked,
            "why": self.why,
        }


def fork_width(
    nodes: int, tunnelled: bool, available_mib: int | None, figures: ConfigureFigures
) -> tuple[int, str]:
    """How many nodes one push run works on at once, and what bounds it where it is fewer
    than every node: an Instance Connect Endpoint's connections where the run tunnels, half
    the controller's available memory at `fork_mib` a fork (`available_mib`; None: unknown,
    not bounded). Never under Ansible's default of 5."""
    width, why = max(5, nodes), ""
    tunnels = int(figures.tunnel_connections.value)
    if tunnelled and width > tunnels:
        width, why = tunnels, f"an EC2 Instance Connect Endpoint carries {tunnels}"
    fork = int(figures.fork_mib.value)
    if available_mib is not None and width > max(5, available_mib // 2 // fork):
        width = max(5, available_mib // 2 // fork)
        why = f"half of the controller's {available_mib} MiB available, at {fork} MiB a fork"
    return width, why


def tunnelled(inventory: Any) -> bool:
    """The inventory reaches its nodes through an SSH tunnel (`rackform_ssh_proxy`)."""
    return bool(((inventory or {}).get("all") or {}).get("vars", {}).get("rackform_ssh_proxy"))


def configuring(plan: Plan) -> list[Configuring]:
    """Each node group's way and expected time (groups without nodes left out)."""
    figures = plan.figures.configure
    per_node = float(figures.node_converge_s.value)
    pushed = sum(g.count for g in plan.node_groups if g.configured == "push")
    width, why = fork_width(pushed, tunnelled(plan.inventory), None, figures)
    out = []
    for g in plan.node_groups:
        if g.count == 0:
            continue
        if g.configured == "boot":
            # Only a node that skips the image's roles is quicker: a node that boots by itself.
            own = float(figures.node_boot_baked_s.value) if plan.baked else per_node
            out.append(Configuring(g.name, g.count, "boot", g.count, 1, own, "", own, plan.baked))
            continue
        at_once = min(width, pushed)
        rounds = math.ceil(pushed / at_once)
        out.append(
            Configuring(g.name, g.count, "push", at_once, rounds, rounds * per_node, why, per_node)
        )
    return out
