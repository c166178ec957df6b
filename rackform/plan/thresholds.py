"""What the smoke job and host checks expect of a node group: thresholds as data.

Defaults come from the catalog per GPU model and node count; the blueprint's
`validation.thresholds` overrides them. Every threshold carries where it came from, and one
that has no calibrated source is None (the check then reports not-run, never pass). The
figures that are rackform's own choices live in DEFAULTS below, each with its reasoning.
Pure: no I/O, and no catalog look-up but the systems' (cached) for the NVLink domains' figures:
every other figure comes from the compiled plan (its GPUs' catalog figures and its arrays). The validators get the result as command-line arguments (they never
import rackform)."""

from __future__ import annotations

from rackform.blueprint.schema.sections import RDMA_FABRICS
from rackform.catalog import Figure, GpuModel
from rackform.catalog.systems import load_systems
from rackform.plan.domain_expect import domain_expectations
from rackform.plan.expectations import Expectations, Threshold
from rackform.plan.model import Basis, NodeGroupPlan
from rackform.plan.shared import data_rate

# rackform's own factors: (value, why).
DEFAULTS = {
    # NVIDIA's AICR recipes pass multi-node H100 all-reduce at >= 0.9 x the threshold (DOMAIN).
    "multi_node_busbw_factor": (
        0.9,
        "multi-node: 0.9 x the single-node figure (NVIDIA AICR recipes, DOMAIN.md)",
    ),
    # Where the catalog has no measured floor for the GPU (its smoke_mfu_pct_min). Public
    # anchors: 41.8% (MPT-1B on 8xH100), 37% (GPT-2 124M on A100), 41-48% (Megatron on H100).
    # A smoke run is short and uncompiled by default, so the floor sits well below them: it
    # catches a throttled, mis-clocked or PCIe-starved GPU, not a slow recipe.
    "mfu_pct": (25.0, "rackform default: below the public 37-48% MFU anchors (DOMAIN.md)"),
    # DCP with one file per rank and fsync reaches a fraction of the array's raw sequential
    # write; a quarter leaves room for an estimated array figure.
    "checkpoint_fraction": (0.25, "0.25 x the array's write GB/s"),
    # A declared array speed is a claim to verify: the direct-IO probe must reach 80% of it.
    "ceiling_fraction": (0.8, "0.8 x the declared storage.checkpoint.write_gbps"),
}


def _cat(fig: Figure, what: str) -> str:
    return f"catalog {what} ({fig.source.key}, {fig.source.date})"


def without_blueprint(loss_drop: float = 0.2) -> Expectations:
    """A local run with nothing declared: only the loss must fall; no GPU is expected."""
    none = Threshold(None, "no blueprint")
    return Expectations(
        group=None,
        nodes=None,
        gpus_per_node=None,
        gpu_model=None,
        gpu_pattern=None,
        fabric=None,
        nccl=None,
        peak_tflops=none,
        allreduce_busbw_gbps=none,
        mfu_pct=none,
        checkpoint_write_gbps=none,
        storage_write_gbps=none,
        loss_drop_fraction=Threshold(loss_drop, "rackform default (blueprint schema)"),
    )


class GroupError(ValueError):
    """The node group asked for is not in the cluster (a user mistake)."""


def pick_group(plan: Basis, name: str | None) -> NodeGroupPlan:
    names = [g.name for g in plan.node_groups]
    if name is None:
        if len(plan.node_groups) == 1:
            return plan.node_groups[0]
        raise GroupError(f"the cluster has node groups {', '.join(names)}: pick one with --group")
    for g in plan.node_groups:
        if g.name == name:
            return g
    raise GroupError(f"no node group {name!r}; the cluster has {', '.join(names)}")


def for_group(plan: Basis, group: str | None = None, nodes: int | None = None) -> Expectations:
    """Expectations for a smoke run across `nodes` nodes of one node group; by default all of
    them, the group's count in the plan's environment (what the blueprint declares)."""
    g = pick_group(plan, group)
    if nodes is None:
        nodes = g.count
    gpu = g.gpu
    th = plan.validation.thresholds
    given = th.model_fields_set

    def override(field: str) -> Threshold | None:
        if field in given and getattr(th, field) is not None:
            return Threshold(getattr(th, field), f"blueprint validation.thresholds.{field}")
        return None

    peak = (
        Threshold(
            gpu.bf16_dense_tflops.value, _cat(gpu.bf16_dense_tflops, f"{gpu.key} bf16_dense_tflops")
        )
        if gpu
        else Threshold(None, "no GPU in this node group")
    )
    mfu = override("mfu_pct") or _mfu(gpu)
    array = g.array
    ckpt = override("checkpoint_write_gbps") or (
        Threshold(
            round(array.write_gbps * DEFAULTS["checkpoint_fraction"][0], 3),
            f"{DEFAULTS['checkpoint_fraction'][1]}; array: {array.write_source}",
        )
        if array.write_gbps
        else Threshold(None, f"no array write figure ({array.write_source})")
    )
    # A declared array speed is a claim to verify; a catalog estimate is not.
    ceiling = (
        Threshold(
            round(array.write_gbps * DEFAULTS["ceiling_fraction"][0], 3),
            DEFAULTS["ceiling_fraction"][1],
        )
        if array.declared and array.write_gbps
        else Threshold(None, "storage.checkpoint.write_gbps not declared")
    )
    loss = Threshold(
        th.loss_drop_fraction,
        "blueprint validation.thresholds.loss_drop_fraction"
        if "loss_drop_fraction" in given
        else "rackform default (blueprint schema)",
    )
    return Expectations(
        group=g.name,
        nodes=nodes,
        gpus_per_node=g.gpus_per_node,
        gpu_model=g.gpu_key,
        gpu_pattern=gpu.device_name if gpu else None,
        fabric=plan.network.fabric,
        nccl=plan.software.nccl if gpu else None,
        peak_tflops=peak,
        allreduce_busbw_gbps=override("allreduce_busbw_gbps")
        or _busbw(gpu, g, nodes, plan.network.fabric),
        mfu_pct=mfu,
        checkpoint_write_gbps=ckpt,
        storage_write_gbps=ceiling,
        loss_drop_fraction=loss,
        smoke_steps=plan.validation.smoke_steps,
        dcgm_level=plan.validation.dcgm_diag_level,
        checkpoint_dir=plan.checkpoint.mount,
        **_shared(plan, g, override("shared_read_gbps")),
        **_links(gpu, g.gpus_per_node),
        **_tier(plan),
        # The catalog's systems (loaded once, cached): the NVLink domains' figures.
        **domain_expectations(plan, g, nodes, load_systems()),
    )


def _tier(plan: Basis) -> dict:
    """Where the smoke job copies its checkpoint (each node under `<tier>/smoke/<node>`,
    replaced at each validation): the plan's checkpoint tier, with its S3 endpoint."""
    tier = plan.checkpoint_tier
    if tier is None:
        return {}
    return {"checkpoint_tier": f"{tier}/smoke", "tier_endpoint": plan.tier_endpoint}


# An NVSwitch board holds 8 GPUs (HGX); 4-GPU boards join their GPUs by NVLink directly.
SWITCH_BOARD_GPUS = 8


def _links(gpu, gpus_per_node: int | None) -> dict:
    """What the host checks want of the GPUs' links: the catalog's NVLinks per GPU and PCIe
    generation, and the fabric manager on a board of NVSwitches."""
    if gpu is None:
        return {}
    return {
        "nvlinks": int(gpu.nvlinks.value) if gpu.nvlinks else None,
        "pcie_gen": int(gpu.pcie_gen.value) if gpu.pcie_gen else None,
        "fabric_manager": bool(gpu.nvswitch and (gpus_per_node or 0) >= SWITCH_BOARD_GPUS),
    }


def _shared(plan: Basis, g: NodeGroupPlan, given: Threshold | None) -> dict:
    """The shared tier's expectations: its mount, its datasets directory, and what one node of
    the group must read from it: the blueprint's figure, else what its GPUs consume."""
    s = plan.shared
    if s is None:
        return {}
    holds = "datasets" in s.holds
    out = {"shared_mount": s.mount, "shared_read_dir": f"{s.mount}/datasets" if holds else None}
    if given is not None:
        return {**out, "shared_read_gbps": given}
    if not holds:
        return {**out, "shared_read_gbps": Threshold(None, "datasets are not on the shared tier")}
    rate = data_rate(plan, (g,))
    if rate is None:
        why = "no training workload on GPUs in this node group to size the data rate"
        return {**out, "shared_read_gbps": Threshold(None, why)}
    per_node = rate.gbps / g.count
    return {
        **out,
        "shared_read_gbps": Threshold(
            float(f"{per_node:.3g}"),  # three significant figures: text needs a few kB/s
            f"what one node's GPUs consume: {rate.tokens_per_s / g.count:,.0f} tokens/s at the"
            f" catalog's {plan.figures.cost.mfu_fraction.value:.0%} MFU x"
            f" {plan.workload.read_bytes_per_token:g} bytes a token",
        ),
    }


def _mfu(gpu: GpuModel | None) -> Threshold:
    """The catalog's floor measured on this GPU model, else rackform's default, saying that
    this GPU's own figure is still to be measured."""
    if gpu is None:
        return Threshold(None, "no GPU in this node group")
    fig = gpu.smoke_mfu_pct_min
    if fig is not None:
        return Threshold(fig.value, _cat(fig, f"{gpu.key} smoke_mfu_pct_min"))
    value, why = DEFAULTS["mfu_pct"]
    return Threshold(value, f"{why}; {gpu.key}'s own floor is still to be measured")


def _busbw(gpu: GpuModel | None, g: NodeGroupPlan, nodes: int, fabric: str) -> Threshold:
    if gpu is None:
        return Threshold(None, "no GPU in this node group")
    fig = gpu.allreduce_busbw_gbps_8gpu
    if fig is None:
        return Threshold(None, f"the catalog has no calibrated all-reduce figure for {gpu.key}")
    if g.gpus_per_node != 8:
        return Threshold(None, f"the catalog figure is for 8 GPUs per node, not {g.gpus_per_node}")
    src = _cat(fig, f"{gpu.key} allreduce_busbw_gbps_8gpu")
    if nodes <= 1:
        return Threshold(fig.value, src)
    # RDMA fabrics carry multi-node all-reduce at NVLink-comparable rates (400G-class per GPU);
    # over plain Ethernet no calibrated figure exists.
    if fabric not in RDMA_FABRICS:
        return Threshold(None, f"no calibrated multi-node figure over {fabric}")
    factor, why = DEFAULTS["multi_node_busbw_factor"]
    return Threshold(round(fig.value * factor, 1), f"{why}; {src}")
