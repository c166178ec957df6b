"""The running world's registry: what each target adds to the stack's program, the commands
that act and the reaper, by its `type`; and a cluster's hosts for the commands that run after `up` (reap, heal, rolling
changes, jobs, status), reached the way its target reaches them (a listed host over SSH; on AWS
an instance the stack created, through the stack's EC2 Instance Connect Endpoint)."""

from __future__ import annotations

from rackform.blueprint.schema.names import UnsafeValue
from rackform.lifecycle.outcome import ActionError
from rackform.plan.inventory import with_nodes
from rackform.plan.model import Plan, thaw
from rackform.reap.target import Reaper
from rackform.scheduler.remote import RemoteError, Runner
from rackform.targets.aws.runtime import RUNTIME as AWS
from rackform.targets.bare_metal.runtime import RUNTIME as BARE_METAL
from rackform.targets.colocation.runtime import RUNTIME as COLOCATION
from rackform.targets.runtime import TargetRuntime

RUNTIMES: dict[str, TargetRuntime] = {r.type: r for r in (AWS, BARE_METAL, COLOCATION)}


def runtime(target_type: str) -> TargetRuntime:
    return RUNTIMES[target_type]


def reaper(target_type: str) -> Reaper:
    """What carries out `rackform reap`'s actions on a cluster of this target."""
    return RUNTIMES[target_type].reaper()


def node(plan: Plan, name: str, identity=None, known_hosts=None) -> Runner:
    """A host of the cluster by name (`identity`, `known_hosts`: the key and known_hosts file a
    command was given, else ssh's own)."""
    return RUNTIMES[plan.target_type].reach(plan, name, identity, known_hosts)


def controller(plan: Plan, identity=None, known_hosts=None) -> Runner:
    """The scheduler's controller."""
    if plan.scheduler is None:
        raise RemoteError(f"cluster {plan.name} declares no scheduler")
    return node(plan, plan.scheduler.controller, identity, known_hosts)


def cluster_inventory(plan: Plan) -> dict:
    """The plan's inventory, with the nodes running now where the stack creates them (AWS: its
    instances by the cluster's tags); RemoteError where they cannot be read, or where the
    target's runtime cannot list the nodes its stack creates."""
    target = RUNTIMES[plan.target_type]
    try:
        live = target.nodes(plan)
    except ActionError as exc:
        raise RemoteError(f"cannot read the cluster's nodes: {exc}") from None
    if live is not None:
        try:
            return with_nodes(plan, live)
        except UnsafeValue as exc:  # an answer that is no name, address or id: never used
            raise RemoteError(f"cannot use the cluster's nodes: {exc}") from None
    if not plan.nodes_listed:
        raise RemoteError(f"{target.label} cannot list the nodes its stack creates")
    return thaw(plan.inventory)
