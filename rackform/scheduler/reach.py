"""A cluster's hosts for the commands that run after `up` (reap, heal, rolling changes, jobs,
status): a node or Slurm's controller by name, reached the way its target reaches it (a listed
host over SSH; on AWS an instance the stack created, through the stack's EC2 Instance Connect
Endpoint)."""

from __future__ import annotations

from rackform.plan.inventory import with_nodes
from rackform.plan.model import Plan, thaw
from rackform.reap.target import ActionError
from rackform.scheduler.remote import RemoteError, Runner
from rackform.targets.runtimes import runtime


def node(plan: Plan, name: str, identity=None, known_hosts=None) -> Runner:
    return runtime(plan.target_type).reach(plan, name, identity, known_hosts)


def controller(plan: Plan, identity=None, known_hosts=None) -> Runner:
    """The scheduler's controller (`identity`, `known_hosts`: the key and known_hosts file a
    command was given, else ssh's own)."""
    if plan.scheduler is None:
        raise RemoteError(f"cluster {plan.name} declares no scheduler")
    return node(plan, plan.scheduler.controller, identity, known_hosts)


def cluster_inventory(plan: Plan) -> dict:
    """The plan's inventory, with the nodes running now where the stack creates them (AWS: its
    instances by the cluster's tags); RemoteError where they cannot be read."""
    try:
        live = runtime(plan.target_type).nodes(plan)
    except ActionError as exc:
        raise RemoteError(f"cannot read the cluster's nodes: {exc}") from None
    return thaw(plan.inventory) if live is None else with_nodes(plan, live)
