"""The compiled plan: one frozen value per effective blueprint that carries every derived fact
once. Pulumi components, cost, thresholds, the inventory and the roles' variables read it; none
of them consults the catalog or computes a fact again. Nothing here does I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rackform.blueprint.loader import Effective
from rackform.blueprint.schema.sections import (
    CheckpointStorage,
    LifecycleSpec,
    NetworkSpec,
    SoftwareSpec,
    ValidationSpec,
    WorkloadSpec,
)
from rackform.catalog import Catalog, GpuModel, InstanceType
from rackform.catalog.preflight import PreflightFigures
from rackform.catalog.raid import RaidLevel
from rackform.plan.expectations import Expectations
from rackform.plan.slurm import SchedulerPlan


def frozen(value: Any) -> Any:
    """A read-only copy of a JSON-like value: mappings become read-only views, lists tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(frozen(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A plain, mutable copy of a `frozen` value (for YAML, JSON, Pulumi inputs, Ansible)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class HostPlan:
    name: str
    address: str
    port: int
    rack: str | None
    nvme: tuple[str, ...]


@dataclass(frozen=True)
class ArrayPlan:
    """One node's checkpoint array as the plan knows it."""

    level: RaidLevel
    drives: int | None  # drives on one node, where known (instance store; listed drives)
    write_gbps: float | None  # one node's array, declared or estimated; None where unknown
    write_source: str  # where write_gbps came from, or why there is none
    declared: bool  # write_gbps is the blueprint's own claim (not a catalog estimate)
    capacity_gb: float | None  # one node's array, where the drives' size is known

    @property
    def data_drives(self) -> int | None:
        return None if self.drives is None else self.level.data_drives(self.drives)


@dataclass(frozen=True)
class NodeGroupPlan:
    name: str
    count: int
    gpu: GpuModel | None  # None for CPU-only hosts (the local testbed)
    gpus_per_node: int
    instance: InstanceType | None  # AWS only
    hosts: tuple[HostPlan, ...]  # bare metal / colocation only
    min_count: int | None
    max_count: int | None
    efa_interfaces: int  # EFA interfaces the launch template attaches (0 without EFA)
    array: ArrayPlan

    @property
    def gpus(self) -> int:
        return self.count * self.gpus_per_node

    # A group's size bounds: an autoscaling group's declared minimum and maximum, else its count
    # both ways (a fixed group). The one fallback, for the autoscaling group that is created
    # and for the node count configuration must find.
    @property
    def min_nodes(self) -> int:
        return self.count if self.min_count is None else self.min_count

    @property
    def max_nodes(self) -> int:
        return self.count if self.max_count is None else self.max_count

    @property
    def gpu_key(self) -> str | None:
        return self.gpu.key if self.gpu else None

    @property
    def instance_type(self) -> str | None:
        return self.instance.key if self.instance else None

    @property
    def has_gpus(self) -> bool:
        return self.gpu is not None and self.gpus_per_node > 0 and self.count > 0


@dataclass(frozen=True)
class RackPlan:
    name: str
    power_kw: float
    gpu_kw: float  # GPU power planned into the rack (catalog watts x GPUs of its hosts)


@dataclass(frozen=True)
class Plan:
    """One cluster in one environment, compiled."""

    effective: Effective = field(repr=False, compare=False)
    name: str
    environment: str
    stack: str
    digest: str
    purpose: str
    owner: str
    target: Any  # the target's schema model (AwsTarget, BareMetalTarget, ColocationTarget)
    target_plan: Any  # what the target's compiler derived (frozen; e.g. the AWS subnets)
    node_groups: tuple[NodeGroupPlan, ...]
    racks: tuple[RackPlan, ...]
    network: NetworkSpec
    checkpoint: CheckpointStorage
    software: SoftwareSpec
    workload: WorkloadSpec | None
    validation: ValidationSpec
    lifecycle: LifecycleSpec
    tags: tuple[tuple[str, str], ...]
    ssh_user: str
    fabrics: tuple[str, ...]  # the network fabrics the target offers
    nodes_listed: bool  # the blueprint lists the nodes (else the stack's outputs name them)
    owned: bool  # the target's hardware is bought outright (bare metal, colocation)
    on_demand: bool  # capacity rented by the hour with no commitment
    expectations: Expectations | None  # the cluster-wide smoke run; None with several groups
    scheduler: SchedulerPlan | None  # None: no scheduler on the cluster
    inventory: Mapping[str, Any]  # Ansible inventory (AWS groups empty until the nodes exist)
    group_vars: Mapping[str, Any]  # the roles' variables
    stack_config: Mapping[str, str]  # what `Pulumi.<stack>.yaml` holds
    project: Path | None = field(compare=False)  # the Pulumi project (Pulumi.yaml), if any
    figures: PreflightFigures = field(repr=False, compare=False)
    catalog: Catalog = field(repr=False, compare=False)  # for right-sizing across the catalog

    @property
    def source(self) -> str:
        return self.effective.source

    @property
    def target_type(self) -> str:
        return self.target.type

    @property
    def nodes(self) -> int:
        return sum(g.count for g in self.node_groups)

    @property
    def gpus(self) -> int:
        return sum(g.gpus for g in self.node_groups)

    @property
    def tag_map(self) -> dict[str, str]:
        return dict(self.tags)

    @property
    def gpu_groups(self) -> tuple[tuple[int, NodeGroupPlan], ...]:
        """(index in node_groups, group) for every group with GPUs and nodes."""
        return tuple((i, g) for i, g in enumerate(self.node_groups) if g.has_gpus)
