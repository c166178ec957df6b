"""The capacity a cluster's node groups launch into, against what EC2 says of it at `up`: each
group's capacity reservation or block exists, is usable and is of the group's instance type; it
holds the nodes of every group that launches into it; it sits in the cluster's zone (EC2 refuses
an instance in a subnet of another zone: EC2 user guide, "Launch instances using Capacity
Blocks", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html); and a
capacity block outlasts the run, since EC2 terminates its instances a while before its end date
(the AWS catalog's `capacity_block_end_lead_min`).

The run's end is now plus the run's length the plan's cost computes from the workload
(`workload.tokens_b` at the catalog's MFU; at the workload's expected utilization where it says
one, else at the catalog's target utilization). Without `tokens_b` the run has no length, and
only the block's end itself is checked against now.

The facts are the plan's `capacity`, which `up` reads from EC2 before anything is created; every
offline command (validate, plan, diff) has none, and these rules find nothing there."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from rackform.blueprint.targets.aws.catalog import load_aws_catalog
from rackform.plan.model import NodeGroupPlan, Plan
from rackform.plan.targets.aws.capacity import Capacity, Reservation
from rackform.preflight.base import Finding, Rule

USABLE = ("active", "scheduled", "pending", "payment-pending")


def _path(plan: Plan, group: NodeGroupPlan) -> tuple:
    """Where the group's reservation id is written: the target's where the group buys as the
    target does, else its own."""
    t = plan.target
    if (group.market, group.reservation_id) == (t.market, t.reservation_id):
        return ("target", "reservation_id")
    return ("node_groups", [g.name for g in plan.node_groups].index(group.name), "reservation_id")


def _reserved(plan: Plan) -> list[tuple[NodeGroupPlan, Capacity, Reservation | None]]:
    c = plan.capacity
    if not isinstance(c, Capacity):
        return []  # offline: nothing was read
    return [(g, c, c.reservations.get(g.reservation_id)) for g in plan.node_groups if g.reserved]


class ReservationUsable(Rule):
    code = "aws-reservation-unusable"
    target = "aws"

    def check(self, plan: Plan) -> Iterable[Finding]:
        for g, _, r in _reserved(plan):
            if r is None:
                problem = f"EC2 describes no capacity reservation {g.reservation_id}"
            elif r.state not in USABLE:
                problem = f"{r.id} is {r.state}"
            elif r.instance_type != g.instance_type:
                problem = f"{r.id} holds {r.instance_type}, not {g.instance_type}"
            else:
                continue
            yield self.finding(
                _path(plan, g),
                f"node group {g.name}: {problem}; its instances cannot launch into it",
                "name a reservation of this account, active or scheduled, for the group's "
                "instance type (aws ec2 describe-capacity-reservations)",
            )


class ReservationCovers(Rule):
    code = "aws-reservation-short"
    target = "aws"

    def check(self, plan: Plan) -> Iterable[Finding]:
        need: dict[str, list[NodeGroupPlan]] = {}
        found: dict[str, tuple[NodeGroupPlan, Reservation]] = {}
        for g, _, r in _reserved(plan):
            if r is not None:
                need.setdefault(r.id, []).append(g)
                found.setdefault(r.id, (g, r))
        for rid, groups in need.items():
            first, r = found[rid]
            nodes = sum(g.max_nodes for g in groups)
            if nodes <= r.total:
                continue
            names = ", ".join(f"{g.name} ({g.max_nodes})" for g in groups)
            yield self.finding(
                _path(plan, first),
                f"{rid} holds {r.total} instances; the node groups launching into it need "
                f"{nodes}: {names}",
                "lower the groups' count (max_count) to what it holds, or buy a larger "
                "reservation or block",
            )


class ReservationZone(Rule):
    code = "aws-reservation-zone"
    target = "aws"

    def check(self, plan: Plan) -> Iterable[Finding]:
        zone = plan.target.availability_zone
        seen = set()
        for g, _, r in _reserved(plan):
            if r is None or r.zone == zone or r.id in seen:
                continue
            seen.add(r.id)
            yield self.finding(
                ("target", "availability_zone"),
                f"{r.id} (node group {g.name}) is in {r.zone}; the cluster's subnet is in "
                f"{zone}, and EC2 launches no instance into a reservation of another zone",
                f"set availability_zone: {r.zone}",
            )


class CapacityBlockEnds(Rule):
    code = "aws-capacity-block-ends"
    target = "aws"

    def check(self, plan: Plan) -> Iterable[Finding]:
        lead_fig = load_aws_catalog().capacity_block_end_lead_min
        lead = timedelta(minutes=lead_fig.value)
        hours, basis = run_hours(plan)
        seen = set()
        for g, c, r in _reserved(plan):
            if r is None or not r.capacity_block or r.end is None or r.id in seen:
                continue
            seen.add(r.id)
            stop = r.end - lead  # EC2 begins terminating its instances here
            end = c.read_at + timedelta(hours=hours or 0)
            if stop >= end:
                continue
            run = f"the run ({basis}) would end {end:%Y-%m-%d %H:%M} UTC" if hours else "now"
            yield self.finding(
                _path(plan, g),
                f"capacity block {r.id} ends {r.end:%Y-%m-%d %H:%M} UTC and EC2 terminates its "
                f"instances {lead_fig.value:g} minutes before ({lead_fig.source.url}); {run}",
                "extend the block (EC2 Capacity Block extensions) or buy a longer one, shorten "
                "the run; or waive with the reason (the job checkpoints and resumes elsewhere)",
            )


def run_hours(plan: Plan) -> tuple[float | None, str]:
    """The run's length in hours as the plan's cost gives it, and what it is based on."""
    run, w = plan.cost.run, plan.workload
    if run is None or not run.at:
        return None, "no workload.tokens_b: its length is unknown"
    target = plan.figures.utilization.target_fraction.value * 100
    pct = w.expected_utilization_pct if w and w.expected_utilization_pct else target
    at = min(run.at, key=lambda a: abs(a.utilization_pct - pct))
    return (
        at.hours,
        f"{run.tokens_b:g}B tokens at {at.utilization_pct:g}% utilization, {at.hours:,.0f} h",
    )


RULES: tuple[Rule, ...] = (
    ReservationUsable(),
    ReservationCovers(),
    ReservationZone(),
    CapacityBlockEnds(),
)
