"""Figures for the preflight rules and the cost report (`preflight.yaml`), with their sources.

These are sizing assumptions, thresholds and prices that belong to no single GPU or instance
type. Like the rest of the catalog each is a `Figure(value, source)`, so a finding or a cost
line can say where its number came from, and no threshold is a literal inside a rule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache

from rackform.catalog import CatalogError, Figure, _figures, _read, _sources


@dataclass(frozen=True)
class MemoryFigures:
    weights_bytes_per_param: Figure  # bf16 weights
    grads_bytes_per_param: Figure  # bf16 gradients
    optimizer_bytes_per_param: Figure  # AdamW: fp32 master copy and two moments
    qlora_base_bytes_per_param: Figure  # 4-bit frozen base with its quantization constants
    lora_adapter_fraction: Figure  # adapter parameters as a fraction of the base
    params_per_layer_per_hidden_sq: Figure  # params ~= this x layers x hidden^2
    hidden_per_layer: Figure  # hidden ~= this x layers (the shape a size is read as)
    head_size: Figure  # one attention head's size, for a shape read from a size
    activation_bytes_per_layer: Figure  # per layer, per token, per hidden unit, no recompute
    checkpointed_bytes_per_layer: Figure  # the same with full activation checkpointing
    reserve_fraction: Figure  # GPU memory the model cannot have
    oversized_below_fraction: Figure  # a replica under this share of a GPU: GPU too big


@dataclass(frozen=True)
class CheckpointFigures:
    max_overhead_fraction: Figure  # checkpoint time / interval above this is an error
    max_seconds: Figure  # one checkpoint slower than this is a warning
    max_goodput_loss: Figure  # the declared interval's goodput this far below the best's
    pcie_x16_gbps: Figure  # {PCIe generation: GB/s one direction over x16}


@dataclass(frozen=True)
class FailureFigures:
    """A published node failure rate, for a cluster whose audit log has too few node-hours."""

    per_node_hour: Figure  # unexpected interruptions per node-hour in service
    hardware_share: Figure  # ...of which each class
    software_share: Figure
    network_share: Figure
    min_node_hours: Figure  # an audit log with fewer node-hours in service is not used


@dataclass(frozen=True)
class PublishedFigures:
    """Goodput others published, shown beside a simulated one."""

    llama3_effective_training: Figure  # "over 90% effective training time"
    hyperpod_goodput_claim: Figure  # "up to 95% training goodput"


@dataclass(frozen=True)
class SharedFigures:
    read_headroom_fraction: Figure  # the data loader may need at most this share of the tier
    # FSx for Lustre's $/GB-month: {deployment type: {MB/s per TiB: price}} (us-east-1)
    fsx_usd_per_gb_month: Figure


@dataclass(frozen=True)
class PowerFigures:
    server_power_factor: Figure  # whole-server draw / GPU draw
    rack_warn_fraction: Figure  # warn when a rack's estimated draw passes this share


@dataclass(frozen=True)
class UtilizationFigures:
    target_fraction: Figure  # the utilization a run should reach
    shared_cloud_fraction: Figure  # what shared cloud VMs typically reach
    owned_breakeven_fraction: Figure  # dedicated hardware pays off above this
    alert_below_fraction: Figure  # `rackform alerts`: a training cluster below this alerts


@dataclass(frozen=True)
class CostFigures:
    hours_per_month: Figure
    spot_discount_low: Figure  # spot saves at least this share of on-demand...
    spot_discount_high: Figure  # ...and at most this share
    reservation_rate_of_on_demand: Figure
    storage_usd_per_gb_month: Figure  # durable object storage for retained checkpoints
    mfu_fraction: Figure  # model FLOPs utilization assumed for run-time estimates
    flops_per_param_token: Figure  # training FLOPs per parameter per token


@dataclass(frozen=True)
class ServingFigures:
    """What a serving node's decode step and prefill take on paper (`plan.decode`)."""

    forward_flops_per_param_token: Figure  # one forward pass: about 2 FLOPs per parameter


@dataclass(frozen=True)
class ConfigureFigures:
    """How long configuring nodes takes, and what it costs the controller (`rackform plan`'s
    configuration lines; the Ansible driver's forks)."""

    node_converge_s: Figure  # one node's first converge from a plain image (measured)
    node_boot_baked_s: Figure  # one node of a baked image, from its user data to its report
    fork_mib: Figure  # controller memory one Ansible fork is counted at
    tunnel_connections: Figure  # connections an EC2 Instance Connect Endpoint carries at once
    boot_deadline_s: Figure  # how long `rackform up` waits for the nodes configured at boot


@dataclass(frozen=True)
class TopologyFigures:
    # The gradients' all-reduce across NVLink domains may take at most this share of a step's
    # compute (beyond it the overlap with the backward pass cannot hide it).
    allreduce_max_step_fraction: Figure


@dataclass(frozen=True)
class PreflightFigures:
    memory: MemoryFigures
    checkpoint: CheckpointFigures
    power: PowerFigures
    utilization: UtilizationFigures
    cost: CostFigures
    shared: SharedFigures
    configure: ConfigureFigures
    failures: FailureFigures
    published: PublishedFigures
    topology: TopologyFigures
    serving: ServingFigures


def _section(doc: dict, name: str, cls: type, sources: dict) -> object:
    raw = doc.get(name)
    if not isinstance(raw, dict):
        raise CatalogError(f"preflight.yaml: section {name!r} is missing")
    values = _figures(raw, sources, f"preflight.yaml:{name}")
    want = {f.name for f in dataclasses.fields(cls)}
    if set(values) != want:
        missing, extra = sorted(want - set(values)), sorted(set(values) - want)
        raise CatalogError(f"preflight.yaml:{name}: missing {missing}, unknown {extra}")
    for key, fig in values.items():
        if not isinstance(fig, Figure):
            raise CatalogError(f"preflight.yaml:{name}.{key}: write {{v:, src:}}")
    return cls(**values)


@cache
def load_preflight_figures() -> PreflightFigures:
    doc = _read("preflight.yaml")
    src = _sources(doc, "preflight.yaml")
    return PreflightFigures(
        memory=_section(doc, "memory", MemoryFigures, src),
        checkpoint=_section(doc, "checkpoint", CheckpointFigures, src),
        power=_section(doc, "power", PowerFigures, src),
        utilization=_section(doc, "utilization", UtilizationFigures, src),
        cost=_section(doc, "cost", CostFigures, src),
        shared=_section(doc, "shared", SharedFigures, src),
        configure=_section(doc, "configure", ConfigureFigures, src),
        failures=_section(doc, "failures", FailureFigures, src),
        published=_section(doc, "published", PublishedFigures, src),
        topology=_section(doc, "topology", TopologyFigures, src),
        serving=_section(doc, "serving", ServingFigures, src),
    )
