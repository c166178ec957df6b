"""What `rackform up` does after the stack's update for the node groups configured at boot
(`NodeGroupPlan.configured == "boot"`, on any target): it waits, with a deadline, until every
node of those groups has configured itself and passed its checks, and names every node that did
not. How a target knows is its runtime's (`await_boot`, the caller hands it over): on AWS the
groups' in-service instances tagged with their pinned artifact; where the blueprint lists the
nodes (bare metal, colocation) the reports they post to the controller's boot server.

The outcome is recorded in the stack, as the `boot_reports` check of the Validate stage's report
(`Judged.check`, kept in the stack config under `BOOT_VERDICT` by `recorded_value` and read back
by the evidence's `recorded_check`): the same nodes in the same states make the same record, so
an `up` whose wait ends as the last one did changes nothing, and one that did not pass leaves
the cluster's validation failed, so its evidence promotes nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rackform.boot.reports import Judged
from rackform.plan.model import NodeGroupPlan, Plan

if TYPE_CHECKING:
    from rackform.boot.serve import Tls


@dataclass(frozen=True)
class BootWait:
    """How `rackform up` waits for the nodes configured at boot: `deadline_s` in all, judging
    every `poll_s`; where the controller serves them (listed nodes: the boot server listens on
    `bind`:`port`, the nodes reach it at `url`, default the bound address, the round's
    directory is `out`, and `tls` is the site's certificate, None for plain HTTP); `say` prints
    a line."""

    deadline_s: float
    bind: str | None = None
    port: int = 0
    url: str | None = None
    out: Path | None = None
    poll_s: float = 5.0
    say: Callable[[str], object] = print
    tls: Tls | None = None


class Booting(Protocol):
    """What a target does for its nodes configured at boot (its runtime's part)."""

    def check_boot(self, plan: Plan, groups: list[NodeGroupPlan], how: BootWait) -> None: ...

    def await_boot(self, plan: Plan, groups: list[NodeGroupPlan], how: BootWait) -> Judged: ...


def boot_groups(plan: Plan) -> list[NodeGroupPlan]:
    """The node groups whose nodes configure themselves at boot (those with nodes)."""
    return [g for g in plan.node_groups if g.configured == "boot" and g.count > 0]


def check_before_up(plan: Plan, how: BootWait, target: Booting) -> None:
    """Refuse, before anything is created, a wait the target could not do (BootError)."""
    groups = boot_groups(plan)
    if groups and how.deadline_s > 0:
        target.check_boot(plan, groups, how)


def wait_for_boot(plan: Plan, how: BootWait, target: Booting) -> Judged | None:
    """Every node of the groups configured at boot, judged once each has passed or the
    deadline passed (by `target`, the plan's target's runtime); None where there is nothing to
    wait for or `how.deadline_s` is 0."""
    groups = boot_groups(plan)
    if not groups or how.deadline_s <= 0:
        return None
    return target.await_boot(plan, groups, how)
