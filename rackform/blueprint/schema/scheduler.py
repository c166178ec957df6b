"""The blueprint's `scheduler:` section: Slurm on a training cluster. Partitions name node groups,
priority tiers order them, and a higher tier preempts (requeues) the jobs of a lower, preemptible
one. `fairness:` adds Slurm's accounting (slurmdbd): accounts with fairshare shares, QOS with
priorities and GPU limits. The rules that need the rest of the blueprint (purpose, target, hosts,
node groups) are `scheduler_rules`, which the Blueprint runs with its other cross-field rules;
the fairness section's own are in `rackform.blueprint.schema.fairness`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from rackform.blueprint.schema.base import Strict, Violation, closest
from rackform.blueprint.schema.fairness import Fairness, fairness_rules
from rackform.blueprint.schema.sections import Name

# The controller instance's default type: 2 vCPUs and 8 GiB. slurmctld keeps the cluster's
# nodes, partitions and jobs in memory and writes its state to the root volume; a cluster of
# tens of nodes and a few thousand jobs fits in a fraction of that.
CONTROLLER_TYPE = "m7i.large"
# An EC2 instance type's name (the AWS target's scheduler rules check it): family, generation
# and capabilities, a period, then the size (m7i.large, c7i.xlarge, m7i-flex.large,
# u-6tb1.metal; EC2 Instance Types guide, "Amazon EC2 instance type naming conventions").
# Whether EC2 sells it in the blueprint's zone is only known to EC2: `pulumi up` says so.
INSTANCE_TYPE_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*\.[a-z0-9]+(-[a-z0-9]+)*$"


class Partition(Strict):
    """A Slurm partition: a queue over some node groups."""

    name: Annotated[Name, Field(description="Partition name (sbatch -p NAME).")]
    node_groups: Annotated[
        tuple[str, ...],
        Field(description="Node groups whose nodes the partition schedules, by name."),
    ]
    default: Annotated[
        bool, Field(description="Jobs that name no partition go here; exactly one partition.")
    ] = False
    priority_tier: Annotated[
        int,
        Field(
            description="Slurm PriorityTier: jobs of a higher tier are scheduled first and preempt the jobs of a lower, preemptible partition on the same nodes.",
            ge=1,
            le=65533,
        ),
    ] = 1
    preemptible: Annotated[
        bool,
        Field(
            description="Jobs here may be preempted (requeued) by jobs of a partition with a higher priority_tier that shares nodes; false: never preempted.",
        ),
    ] = False
    max_time_min: Annotated[
        int | None,
        Field(
            description="Longest a job may run, in minutes (Slurm MaxTime); none: unlimited.", ge=1
        ),
    ] = None


class Preemption(Strict):
    mode: Annotated[
        Literal["requeue"],
        Field(
            description="What happens to a preempted job: requeue (it goes back to the queue and resumes from its checkpoint when it runs again)."
        ),
    ] = "requeue"
    grace_s: Annotated[
        int,
        Field(
            description="Seconds a preempted job has between SIGTERM and SIGKILL to write a checkpoint (Slurm GraceTime).",
            ge=0,
            le=3600,
        ),
    ] = 120


class SlurmScheduler(Strict):
    """Slurm on the cluster's nodes: slurmctld on the controller, slurmd on every node."""

    type: Annotated[Literal["slurm"], Field(description="The scheduler: slurm.")]
    controller: Annotated[
        str | None,
        Field(
            description="The host that runs slurmctld, by its name in node_groups[].hosts (bare metal, colocation); it runs slurmd too. Not on aws: the stack creates a controller instance, <stack>-slurmctld.",
        ),
    ] = None
    controller_instance_type: Annotated[
        str | None,
        Field(
            description=f"aws only: the EC2 instance type of the controller instance the stack creates (slurmctld only, no GPUs, in no partition); default {CONTROLLER_TYPE}.",
            # Checked by the AWS target's rules, which say what is wrong; editors check it too.
            json_schema_extra={"pattern": INSTANCE_TYPE_PATTERN},
        ),
    ] = None
    partitions: Annotated[
        tuple[Partition, ...],
        Field(description="Partitions (queues); exactly one is the default.", min_length=1),
    ]
    preemption: Annotated[
        Preemption, Field(description="How jobs of a lower priority tier are preempted.")
    ] = Preemption()
    fairness: Annotated[
        Fairness | None,
        Field(
            description="Fairness between accounts and QOS through Slurm's accounting (slurmdbd with MariaDB on the controller); none: no accounting, jobs ordered by partition tier alone.",
        ),
    ] = None


def scheduler_rules(bp: Any) -> list[Violation]:
    """The scheduler's rules that read the rest of the blueprint; paths from its root."""
    s = bp.scheduler
    if s is None:
        return []
    if bp.purpose != "training":
        return [
            Violation(
                ("scheduler",),
                "a scheduler is for training clusters; an inference cluster serves, it runs no batch jobs",
                "remove scheduler, or declare it in a training blueprint",
            )
        ]
    # Where Slurm's controller runs is the target's to say (its schema's scheduler_rules).
    return _partitions(bp) + fairness_rules(bp)


def controller_host_rules(bp: Any) -> list[Violation]:
    """Where the blueprint lists its hosts (they exist before the stack runs), Slurm's
    controller is one of them."""
    if bp.scheduler.controller_instance_type is not None:
        return [
            Violation(
                ("scheduler", "controller_instance_type"),
                f"on {bp.target.type} the controller is a host of the blueprint: there is no "
                "instance to size",
                "remove controller_instance_type",
            )
        ]
    hosts = [h.name for g in bp.node_groups for h in g.hosts]
    c = bp.scheduler.controller
    if c is None:
        return [
            Violation(
                ("scheduler", "controller"),
                "Slurm needs a controller host",
                "add controller: one of " + ", ".join(hosts),
            )
        ]
    if c not in hosts:
        return [
            Violation(
                ("scheduler", "controller"),
                f"controller {c!r} is not a host of this blueprint",
                closest(c, hosts),
            )
        ]
    return []


def _partitions(bp: Any) -> list[Violation]:
    groups = {g.name: g for g in bp.node_groups}
    parts = bp.scheduler.partitions
    at = ("scheduler", "partitions")
    out: list[Violation] = []
    seen: set[str] = set()
    for i, p in enumerate(parts):
        if p.name in seen:
            out.append(
                Violation(
                    (*at, i, "name"),
                    f"partition {p.name!r} is declared twice",
                    "rename one or merge them",
                )
            )
        seen.add(p.name)
        for j, name in enumerate(p.node_groups):
            if name not in groups:
                out.append(
                    Violation(
                        (*at, i, "node_groups", j),
                        f"partition {p.name!r} names {name!r}, which is not a node group",
                        closest(name, list(groups)),
                    )
                )
        known = [n for n in p.node_groups if n in groups]
        if known == list(p.node_groups) and not any(_has_nodes(groups[n]) for n in known):
            out.append(
                Violation(
                    (*at, i, "node_groups"),
                    f"partition {p.name!r} names no nodes",
                    "list node groups that have nodes: " + ", ".join(groups),
                )
            )
    defaults = [p.name for p in parts if p.default]
    if len(defaults) != 1:
        out.append(
            Violation(
                at,
                "no partition is the default"
                if not defaults
                else f"{len(defaults)} partitions are the default ({', '.join(defaults)})",
                "set default: true on exactly one partition",
            )
        )
    # With a partition's node groups wrong, what shares nodes with what is not known yet.
    return out or _preemptible(parts, at)


def _has_nodes(group: Any) -> bool:
    """Listed hosts (bare metal, colocation: a parked group keeps its hosts), or a count of
    instances the stack creates (AWS, whose groups list none)."""
    return bool(group.hosts or group.count)


def _preemptible(parts: tuple[Partition, ...], at: tuple) -> list[Violation]:
    """A preemptible partition needs one of a higher tier on some of its nodes, or nothing ever
    preempts it (a blueprint that says preemption without any)."""
    out = []
    for i, p in enumerate(parts):
        above = [
            q
            for q in parts
            if q.priority_tier > p.priority_tier and set(q.node_groups) & set(p.node_groups)
        ]
        if p.preemptible and not above:
            out.append(
                Violation(
                    (*at, i, "preemptible"),
                    f"partition {p.name!r} is preemptible, but no partition of a higher priority_tier shares its nodes",
                    "give another partition on these node groups a higher priority_tier, or set preemptible: false",
                )
            )
    return out
