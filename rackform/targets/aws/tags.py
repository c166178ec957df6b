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
    """An autoscaling group's own tag shape. Not propagated: the launch template's tag
    specifications tag the instances, so the two never disagree."""
    return [
        {"key": k, "value": v, "propagate_at_launch": False}
        for k, v in aws_tags(plan, name).items()
    ]


def tag_specifications(plan: Plan, name: str) -> list[dict[str, object]]:
    tags = aws_tags(plan, name)
    return [{"resource_type": kind, "tags": tags} for kind in LAUNCH_TAGGED]
