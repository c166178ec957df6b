"""Tags for AWS resources: the cluster's tags from the plan plus a Name. Reaping and cost reports
read them, so every taggable resource carries all of them."""

from __future__ import annotations

from rackform.plan.model import Plan

# Launch-template tag specifications: what an instance started from the template carries from
# its first second (the autoscaler starts inference instances; nobody else tags them).
LAUNCH_TAGGED = ("instance", "volume", "network-interface")


def aws_tags(plan: Plan, name: str) -> dict[str, str]:
    return {**plan.tag_map, "Name": name}


def asg_tags(plan: Plan, name: str) -> list[dict[str, object]]:
    """An autoscaling group's own tag shape, propagated to the instances it launches: the
    launch template carries only what a node is (`nodes.identity_tags`), so an edit of
    the owner or the idle policy updates the group in place and reaches the nodes it launches
    next (instances already running keep the tags they were launched with)."""
    return [
        {"key": k, "value": v, "propagate_at_launch": True} for k, v in aws_tags(plan, name).items()
    ]
