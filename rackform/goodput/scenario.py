"""What a goodput simulation runs: a training plan's cluster, checkpoint and failure rate, its
health policy and out-of-service budget, and the assumptions no one has published a figure
for (each named, with why that value, and shown beside every result)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from rackform.blueprint.schema.health import HealthPolicy
from rackform.plan.interval import HOUR, FailureRate
from rackform.plan.model import Plan

REQUEUE, ELASTIC = "requeue", "elastic"
MODES = (REQUEUE, ELASTIC)


@dataclass(frozen=True)
class Assumptions:
    """Times the simulation needs that no catalog source gives: rackform's assumptions, to be
    replaced by measurements (`docs/guides/goodput.md` says how each was chosen)."""

    relaunch_s: float = 300.0  # a job's relaunch before it reads its checkpoint (allocation,
    # rendezvous, framework start): minutes, as the launcher's torch import alone shows
    heal_period_s: float = 300.0  # how often heal runs (a five-minute timer)
    remedy_s: dict[str, float] = field(
        default_factory=lambda: {
            "reset": 120.0,  # a GPU reset
            "reboot": 600.0,  # a reboot of a GPU server, firmware and driver load included
            "power-cycle": 900.0,  # a BMC power cycle
            "replace": 1800.0,  # a new cloud instance, configured from its baked image
        }
    )
    fixed_share: float = 0.5  # of hardware faults, the share a remediation fixes (the rest
    # fail re-validation and go to a person): Llama 3's table 5 has most faults in the GPU
    ticket_s: float = 24 * HOUR  # a person's repair (next business day)

    def as_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int
    gpus_per_node: int
    interval_s: float  # training time between checkpoints
    checkpoint_s: float  # what one checkpoint blocks
    restore_s: float  # reading the checkpoint back on a restart
    rate: FailureRate
    policy: HealthPolicy
    budget: int  # nodes out of service at once (lifecycle.max_out_of_service)
    min_nodes: int  # elastic: the fewest nodes the job goes on with
    assumptions: Assumptions = Assumptions()
    spares: int = 0  # nodes paid for and kept out of the job, to stand in for a failed one

    @property
    def job_nodes(self) -> int:
        """The nodes the job runs on at full size."""
        return self.nodes - self.spares

    @property
    def restart_s(self) -> float:
        return self.assumptions.relaunch_s + self.restore_s

    def with_(self, **changes) -> Scenario:
        return replace(self, **changes)


class NotTraining(ValueError):
    """A blueprint the simulation cannot run: no training checkpoint to simulate."""


def _why_no_interval(plan: Plan) -> str:
    """Why a plan has no checkpoint interval, with what a user does about it."""
    if not plan.training:
        return "an inference cluster runs no training job to simulate"
    if plan.workload is None:
        return "no training workload to simulate (fix: declare `workload:` with model_params_b)"
    return (
        "the checkpoint's write speed is unknown, so neither its cost nor the interval is "
        "known (fix: set storage.checkpoint.write_gbps, or give --evidence of a validation "
        "that measured it)"
    )


def from_plan(
    plan: Plan,
    *,
    interval: str = "best",
    min_nodes: int | None = None,
    spares: int = 0,
    assumptions: Assumptions | None = None,
) -> Scenario:
    """The scenario of a training plan: its GPU nodes, its checkpoint (C, R) and failure rate
    (`plan.interval`), its health policy (the default where it declares none) and budget.
    `interval`: "best" (Daly's) or "declared" (the blueprint's, else the best). `spares`:
    nodes kept out of the job to stand in for a failed one (the job runs on the rest; the
    interval stays the plan's). `min_nodes`: the elastic job's floor (default: the job's
    nodes less the budget)."""
    iv = plan.interval
    if iv is None:
        raise NotTraining(f"{plan.name}: {_why_no_interval(plan)}")
    nodes = plan.gpu_nodes
    gpus = sum(g.count * g.gpus_per_node for _, g in plan.gpu_groups)
    budget = plan.lifecycle.budget(nodes)
    if not 0 <= spares < nodes:
        raise NotTraining(f"{plan.name}: {spares} spares of {nodes} nodes leave no job")
    tau = iv.declared_s if interval == "declared" and iv.declared_s else iv.best_s
    job = nodes - spares
    floor = max(1, job - budget) if min_nodes is None else min_nodes
    return Scenario(
        name=plan.stack,
        nodes=nodes,
        gpus_per_node=max(1, math.ceil(gpus / max(nodes, 1))),
        interval_s=tau,
        checkpoint_s=iv.c_s,
        restore_s=iv.r_s,
        rate=iv.rate,
        policy=plan.lifecycle.health or HealthPolicy(),
        budget=budget,
        min_nodes=max(1, min(floor, job)),
        assumptions=assumptions or Assumptions(),
        spares=spares,
    )
