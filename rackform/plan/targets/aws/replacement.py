"""How the AWS target's nodes are replaced when their template changes, as `rackform plan`
shows it: the blueprint's rollout strategy (standalone instances that Pulumi deletes before it
creates, in parallel: all at once; or a group's instance refresh, terminating within the
out-of-service budget or launching first) and the downtime it means."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rackform.plan.model import Plan


def replacement(plan: Plan, resources: list[Mapping[str, Any]]) -> dict[str, Any]:
    strategy = plan.target_plan.rollout
    first = [r["name"] for r in resources if (r.get("options") or {}).get("delete_before_replace")]
    nodes = [r for r in resources if r["type"] == "aws:ec2/instance:Instance"]
    if strategy == "delete-first" and nodes:
        downtime = (
            f"a change that replaces the nodes deletes all {len(nodes)} first (Pulumi replaces "
            "them in parallel): the cluster is down until the new nodes boot and Configure "
            "and Validate finish, and needs no capacity beyond its own"
        )
    elif strategy == "delete-first":
        budget = plan.lifecycle.budget(plan.nodes)
        downtime = (
            "an instance refresh terminates before it launches: at most the out-of-service "
            f"budget ({budget} of {plan.nodes} nodes, lifecycle.max_out_of_service) is out "
            "at a time, and no capacity beyond the group's own is needed"
        )
    else:
        downtime = (
            "replacements launch and configure before the old nodes go: no downtime, but up "
            "to twice the capacity (and vCPU quota) while it runs"
        )
    return {
        "strategy": strategy,
        "why": plan.target_plan.rollout_why,
        "downtime": downtime,
        "delete_first": first,
    }
