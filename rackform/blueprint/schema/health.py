"""`lifecycle.health`: how `rackform heal` judges a cluster's nodes and what it may do about a
failed one. Defaults a team can use as they are: NVIDIA's recommended action for each XID code
(the catalog's `xid.yaml`), a GPU reset for uncorrectable memory errors, a drain (a person's
ticket) for storage and fabric faults. How many nodes may be out of service at once is the
lifecycle's budget (`lifecycle.max_out_of_service`, shared with rolling changes). Which remediations a target can carry out is the target's schema rule
(`TargetSchema.heal_actions`): a GPU reset and a reboot everywhere, a Redfish power cycle on
bare metal and colocation, replacing the instance on AWS."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from rackform.blueprint.schema.base import Strict

# Least to most disruptive; `monitor` names the node and leaves it in service.
HealAction = Literal["monitor", "drain", "reset", "reboot", "power-cycle", "replace"]
HEAL_ACTIONS: tuple[str, ...] = HealAction.__args__  # type: ignore[attr-defined]


class FaultActions(Strict):
    """The action for each class of fault a node can show (an XID code's own action comes from
    NVIDIA's catalog unless `xid` names it)."""

    xid: Annotated[
        dict[int, HealAction],
        Field(
            default_factory=dict,
            description="Actions for XID codes, over NVIDIA's recommendation for each (rackform/catalog/xid.yaml). A code neither names is `monitor`, with a warning naming it.",
        ),
    ]
    memory: Annotated[
        HealAction,
        Field(
            description="Uncorrectable (double-bit) ECC errors, a pending or failed row remap: a GPU reset activates a pending remap (NVIDIA's row-remapping guide)."
        ),
    ] = "reset"
    gpu_missing: Annotated[
        HealAction,
        Field(
            description="Fewer GPUs reporting than the node group has (a GPU fallen off the bus)."
        ),
    ] = "reboot"
    pcie: Annotated[
        HealAction,
        Field(description="PCIe replays above `pcie_replays_per_hour` on a GPU: a link going bad."),
    ] = "monitor"
    throttling: Annotated[
        HealAction,
        Field(description="Thermal or power-brake clock throttling (a cooling or power fault)."),
    ] = "monitor"
    storage: Annotated[
        HealAction,
        Field(
            description="The checkpoint array degraded (a failed or missing member) or its filesystem read-only: a drive to replace, a person's ticket."
        ),
    ] = "drain"
    fabric: Annotated[
        HealAction,
        Field(description="An InfiniBand / EFA port down, or its link-down counter rising."),
    ] = "drain"
    heartbeat: Annotated[
        HealAction,
        Field(
            description="The job's heartbeat stopped on this node while the job's other nodes go on."
        ),
    ] = "drain"
    performance: Annotated[
        HealAction,
        Field(
            description="A node measuring below `outlier_fraction` of its node group's median (a noisy neighbour, a GPU trained down)."
        ),
    ] = "monitor"
    validation: Annotated[
        HealAction,
        Field(
            description="The node's last validation report failed, or Slurm's health check fails one of the quick host checks on it (the checkpoint mount counts as storage)."
        ),
    ] = "drain"


class HealthPolicy(Strict):
    actions: Annotated[FaultActions, Field(description="The action for each class of fault.")] = (
        FaultActions()
    )
    breaker_fraction: Annotated[
        float,
        Field(
            description="When more than this share of a cluster's nodes (and more than one) look unhealthy at once, heal acts on none of them: a fleet-wide signal is a monitoring or driver fault far more often than that many GPUs.",
            gt=0,
            le=1,
        ),
    ] = 0.5
    outlier_fraction: Annotated[
        float,
        Field(
            description="A node whose self-measurement is below this share of its node group's median is suspect.",
            gt=0,
            lt=1,
        ),
    ] = 0.8
    pcie_replays_per_hour: Annotated[
        int, Field(description="PCIe replays an hour on one GPU above which it is suspect.", ge=1)
    ] = 100
    lookback_minutes: Annotated[
        int,
        Field(
            description="How far back heal looks for XID errors and counters that rose.",
            ge=5,
            le=1440,
        ),
    ] = 30
    jobs: Annotated[
        Literal["requeue", "wait"],
        Field(
            description="`rackform heal --apply`: a drained node's running jobs are requeued (Slurm signals them to checkpoint first, within its grace time), or waited for up to `wait_minutes`, then requeued."
        ),
    ] = "requeue"
    wait_minutes: Annotated[
        int, Field(description="jobs: wait: how long heal waits for a node's jobs.", ge=1, le=10080)
    ] = 60
    validate_minutes: Annotated[
        int,
        Field(
            description="The most a remediated node's re-validation (host checks and a one-node smoke job) may take before it counts as failed.",
            ge=1,
            le=600,
        ),
    ] = 20
    retry_window_hours: Annotated[
        int,
        Field(
            description="A node whose remediation failed twice within this many hours is not remediated again: heal drains it and names it for a person (replace, don't repair).",
            ge=1,
            le=720,
        ),
    ] = 24
    notify_only: Annotated[
        bool,
        Field(description="Judge and notify, never act (whatever each fault's action says)."),
    ] = False
