"""The configure resource's `rollout` input, as the cluster's stack gives it: what the resource
needs to roll a change to node software through Slurm under `rackform up` (`rollout.stage`,
imported only in the provider's process, when it runs)."""

from __future__ import annotations

from typing import Any

from rackform.plan.model import Plan, thaw
from rackform.rollout.plan import basis
from rackform.scheduler.remote import host

LIFECYCLE = {"max_out_of_service", "rollout"}


def rollout_input(plan: Plan) -> dict[str, Any] | None:
    """What the configure resource needs to roll a change: None where `up` does not roll (no
    scheduler, nodes the stack creates, a controller that is not one of the listed hosts)."""
    s = plan.scheduler
    if s is None or not s.controller_is_node or not plan.nodes_listed:
        return None
    h = host(plan, s.controller)
    if h is None:
        return None
    b = basis(plan)
    return {
        "stack": plan.stack,
        "digest": plan.digest,
        "lifecycle": plan.lifecycle.model_dump(mode="json", include=LIFECYCLE),
        "domains": {d: list(ns) for d, ns in b.domains.items()},
        "nodes": thaw(b.nodes),
        "controller": {"user": plan.ssh_user, "address": h.address, "port": h.port},
        # The smoke job's variables too (the resource's own are what installs): a batch's
        # re-validation runs it.
        "validation": thaw(plan.group_vars),
    }
