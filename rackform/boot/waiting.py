"""What `rackform up` does after the stack's update for the node groups configured at boot
(`NodeGroupPlan.configured == "boot"`, on any target): it waits, with a deadline, until every
node of those groups has configured itself and passed its checks, and names every node that did
not. How a target knows is its runtime's (`TargetRuntime.await_boot`): on AWS the groups'
in-service instances tagged with their pinned artifact; where the blueprint lists the nodes (bare
metal, colocation) the reports they post to the controller's boot server.

The outcome is recorded in the stack, as the `boot_reports` check of the Validate stage's report
(`Judged.check`; the stack config key `BOOT_VERDICT`, rackform/plan/compile.py, carries it to
the program: rackform/boot/reports.py's `recorded_value` and `recorded_check`): the same nodes
in the same states make the same record, so an `up` whose wait ends as the last one did changes
nothing, and one that did not pass leaves the cluster's validation failed, so its evidence
promotes nothing (rackform/evidence/statement.py's `check`)."""

from __future__ import annotations

from rackform.boot.reports import Judged
from rackform.plan.model import NodeGroupPlan, Plan
from rackform.targets.runtime import BootWait
from rackform.targets.runtimes import runtime


def boot_groups(plan: Plan) -> list[NodeGroupPlan]:
    """The node groups whose nodes configure themselves at boot (those with nodes)."""
    return [g for g in plan.node_groups if g.configured == "boot" and g.count > 0]


def check_before_up(plan: Plan, how: BootWait) -> None:
    """Refuse, before anything is created, a wait the target could not do (BootError)."""
    groups = boot_groups(plan)
    if groups and how.deadline_s > 0:
        runtime(plan.target_type).check_boot(plan, groups, how)


def wait_for_boot(plan: Plan, how: BootWait) -> Judged | None:
    """Every node of the groups configured at boot, judged once each has passed or the
    deadline passed; None where there is nothing to wait for or `how.deadline_s` is 0."""
    groups = boot_groups(plan)
    if not groups or how.deadline_s <= 0:
        return None
    return runtime(plan.target_type).await_boot(plan, groups, how)
