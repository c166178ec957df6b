"""The names of the instances an AWS training stack creates, known before the stack exists: one
`aws.ec2.Instance` per node, `{stack}-{group}-{i}`, and the Slurm controller,
`{stack}-slurmctld`. The Pulumi program names its resources with these, the stack's outputs (and
so the inventory) name the hosts with them, and the plan names Slurm's nodes with them, so
slurm.conf is written from the same names the inventory will hold.

A node's name always ends in `-<index>` and the controller's in `-slurmctld`, so the controller
can never share a name with a node, whatever the node groups are called."""

from __future__ import annotations

from typing import Any

CONTROLLER_SUFFIX = "slurmctld"


def node_name(stack: str, group: str, index: int) -> str:
    return f"{stack}-{group}-{index}"


def node_names(stack: str, group: str, count: int) -> tuple[str, ...]:
    return tuple(node_name(stack, group, i) for i in range(count))


def controller_name(stack: str) -> str:
    return f"{stack}-{CONTROLLER_SUFFIX}"


def asg_name(plan: Any, group: Any) -> str:
    """A serving group's Auto Scaling group (its nodes are named by their instance ids); the
    plan and the group (untyped: the schema imports this module, and the plan imports the
    schema)."""
    return f"{plan.stack}-{group.name}"
