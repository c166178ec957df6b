"""A cluster's hosts for the commands that run after `up` (reap, heal, rolling changes, jobs,
status): a node or Slurm's controller by name, reached the way its target reaches it (a listed
host over SSH; on AWS an instance the stack created, through the stack's EC2 Instance Connect
Endpoint)."""

from __future__ import annotations

from rackform.plan.model import Plan
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
