"""Checkpoint rules: how long a checkpoint takes, what share of training it costs, and whether
the array can hold the checkpoints kept.

size = weights, plus optimizer state unless `workload.checkpoint_contents: weights` (LoRA and
QLoRA save only their adapters). time = size / write speed, where the speed is one node's array
(`storage.checkpoint.write_gbps`, or on AWS the catalog's instance-store drives x GB/s per
drive for the RAID level) times the nodes writing at once (every node writes its own shard
under `sharding: fsdp`; one rank writes under `ddp`). overhead = time / interval. Compile
computes size and time once (`rackform.plan.sizing`, kept as `Plan.sizing`); the rules compare.
"""

from __future__ import annotations

from collections.abc import Iterable

from rackform.plan.model import Plan
from rackform.plan.sizing import CheckpointTime
from rackform.preflight.base import Finding, Rule, gb


def describe(t: CheckpointTime) -> str:
    parallel = f", {t.writers} nodes writing their shards at once" if t.writers > 1 else ""
    return (
        f"a {gb(t.size_gb)} checkpoint at {t.node_gbps:g} GB/s per node "
        f"({t.source}{parallel}) takes {t.seconds:.1f} s"
    )


def _speed_path(plan: Plan) -> tuple[str, ...]:
    if plan.checkpoint.write_gbps is not None:
        return ("storage", "checkpoint", "write_gbps")
    return ("storage", "checkpoint")


def _asynchronous(plan: Plan) -> bool:
    return plan.interval is not None and plan.interval.asynchronous


def _blocking_s(plan: Plan) -> float:
    """What one checkpoint holds training for: the write, or an asynchronous one's copy to
    host memory (`Plan.interval`)."""
    if _asynchronous(plan):
        return plan.interval.c_s
    return plan.sizing.checkpoint.seconds


class CheckpointOverhead(Rule):
    code = "checkpoint-overhead"

    def check(self, plan: Plan) -> Iterable[Finding]:
        t, w = plan.sizing.checkpoint, plan.workload
        if t is None or w is None or w.checkpoint_interval_min is None:
            return
        limit = plan.figures.checkpoint.max_overhead_fraction.value
        overhead = _blocking_s(plan) / (w.checkpoint_interval_min * 60)
        if overhead <= limit:
            return
        minutes = _blocking_s(plan) / limit / 60
        fixes = [f"checkpoint every {minutes:.0f} min or more"]
        if w.checkpoint_contents == "full" and w.method in ("pretrain", "full"):
            fixes.append("keep optimizer state out (workload.checkpoint_contents: weights)")
        fixes.append("write to faster storage (local NVMe RAID0) or checkpoint asynchronously")
        what = describe(t) if not _asynchronous(plan) else plan.interval.c_source
        yield self.finding(
            ("workload", "checkpoint_interval_min"),
            f"{what} every {w.checkpoint_interval_min:g} min: {overhead:.1%} of "
            f"training time spent checkpointing (limit {limit:.0%})",
            "; ".join(fixes),
        )


def _pct(g: float) -> str:
    return f"{g * 100:.1f}%"


class CheckpointInterval(Rule):
    """The declared interval against Daly's (`rackform.plan.interval`): C from the cluster's
    last validation or the tier's speed, the failure rate from its audit log or the catalog."""

    code = "checkpoint-interval"

    def check(self, plan: Plan) -> Iterable[Finding]:
        iv = plan.interval
        if iv is None or iv.loss_points is None:
            return
        limit = plan.figures.checkpoint.max_goodput_loss.value * 100
        if iv.loss_points <= limit:
            return
        mtbf_h = iv.job_mtbf_s / 3600
        why = (
            f"checkpointing every {iv.declared_s / 60:g} min keeps {_pct(iv.goodput_declared)} "
            f"of the GPU-hours as training, every {iv.best_s / 60:.0f} min would keep "
            f"{_pct(iv.goodput_best)} ({iv.loss_points:.1f} points; limit {limit:g}): "
            f"a checkpoint blocks {iv.c_s:.1f} s ({iv.c_source}), the job's {iv.nodes} nodes "
            f"fail every {mtbf_h:.1f} h ({iv.rate.source})"
        )
        if not iv.first_order_holds:
            why += "; failures come within a few intervals, so the first-order figures are rough"
        yield self.finding(
            ("workload", "checkpoint_interval_min"),
            why,
            f"set workload.checkpoint_interval_min to {iv.best_s / 60:.0f}",
        )


class CheckpointSlow(Rule):
    code = "checkpoint-slow"

    def check(self, plan: Plan) -> Iterable[Finding]:
        t = plan.sizing.checkpoint
        limit = plan.figures.checkpoint.max_seconds.value
        if t is None or t.seconds <= limit or _asynchronous(plan):
            return  # an asynchronous write does not hold the GPUs
        fixes = ["use faster storage (more NVMe drives in RAID0)"]
        if plan.workload.sharding == "ddp" and plan.gpu_nodes > 1:
            fixes.append("shard the checkpoint over the nodes (workload.sharding: fsdp)")
        fixes.append("or checkpoint asynchronously and waive with the reason")
        yield self.finding(
            _speed_path(plan),
            f"{describe(t)} (rule of thumb: {limit:g} s or less); the GPUs wait that long "
            "every checkpoint unless it is asynchronous",
            "; ".join(fixes),
        )


class CheckpointThroughputUnknown(Rule):
    code = "checkpoint-throughput-unknown"

    def check(self, plan: Plan) -> Iterable[Finding]:
        checkpoints = plan.sizing.checkpoint_gb is not None  # a training workload
        # Every group parked (count: 0): no node writes anything.
        if not checkpoints or plan.sizing.array is not None or not plan.writing_groups:
            return
        yield self.finding(
            ("storage", "checkpoint"),
            "the checkpoint array's write speed is unknown, so checkpoint time and overhead "
            "were not checked",
            "set storage.checkpoint.write_gbps (one node's array, in GB/s)",
        )


class CheckpointCapacity(Rule):
    code = "checkpoint-capacity"

    def check(self, plan: Plan) -> Iterable[Finding]:
        t, w, arr = plan.sizing.checkpoint, plan.workload, plan.sizing.array
        if t is None or w is None or arr is None or arr.capacity_gb is None:
            return
        per_node = t.size_gb / t.writers * w.checkpoints_retained
        if per_node <= arr.capacity_gb:
            return
        yield self.finding(
            ("workload", "checkpoints_retained"),
            f"{w.checkpoints_retained} checkpoints of {gb(t.size_gb)} put {gb(per_node)} on "
            f"each node's array, which holds {gb(arr.capacity_gb)}",
            "keep fewer checkpoints, write weights only, or use a RAID level with more capacity",
        )


class CheckpointRaidDrives(Rule):
    code = "checkpoint-raid-drives"

    def check(self, plan: Plan) -> Iterable[Finding]:
        level = plan.checkpoint.raid_level
        for g in plan.node_groups:
            need = int(g.array.level.min_devices.value)
            n = g.array.drives
            if n is None or n >= need or g.count == 0:
                continue  # on-prem drives are found on the host when none are listed
            where = g.instance.key if g.instance else f"node group {g.name!r}"
            yield self.finding(
                ("storage", "checkpoint", "raid_level"),
                f"RAID{level} needs at least {need} drives but {where} has {n}",
                f"use raid_level: 0 (or 1 with two drives), or a node type with {need}+ drives",
            )
            return


RULES: tuple[Rule, ...] = (
    CheckpointOverhead(),
    CheckpointInterval(),
    CheckpointSlow(),
    CheckpointThroughputUnknown(),
    CheckpointCapacity(),
    CheckpointRaidDrives(),
)
