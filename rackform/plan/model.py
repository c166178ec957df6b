"""The compiled plan: one frozen value per effective blueprint that carries every derived fact
once. Pulumi components, preflight, the inventory and the roles' variables read it; none of
them consults the catalog or computes a fact again. Nothing here does I/O.

A `Plan` is its `Basis` (the blueprint's sections and what the target's compiler made of its
node groups) plus what compile derives from that basis: the workload's sizing, the cost, each
node group's expectations, the inventory and the roles' variables. Compile builds the basis,
derives from it, and makes the plan once, complete; nothing is filled in later."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rackform.blueprint.loader import Effective
from rackform.blueprint.schema.image import ImageSpec
from rackform.blueprint.schema.object_tier import ObjectStorage
from rackform.blueprint.schema.sections import (
    CheckpointStorage,
    LifecycleSpec,
    NetworkSpec,
    SoftwareSpec,
    ValidationSpec,
    WorkloadSpec,
)
from rackform.blueprint.schema.shared import SharedStorage
from rackform.catalog import Catalog, GpuModel, InstanceType
from rackform.catalog.preflight import PreflightFigures
from rackform.plan.arrays import ArrayPlan
from rackform.plan.decode import DecodeBound
from rackform.plan.expectations import Expectations
from rackform.plan.fabric import TopologyPlan
from rackform.plan.interval import CheckpointInterval
from rackform.plan.pricing import Cost
from rackform.plan.sizing import Sizing, usable_gb
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


# The data tier's stack is the cluster's name with this suffix; its config names the tier.
DATA_STACK_SUFFIX = "-data"
TIER_KEY = "rackform:tier"


def stack_name(effective: Effective) -> str:
    """The Pulumi stack of a blueprint's environment: `<name>-<environment>`."""
    return f"{effective.blueprint.name}-{effective.environment}"


@dataclass(frozen=True)
class HostPlan:
    name: str
    address: str
    port: int
    rack: str | None
    nvme: tuple[str, ...]


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
    # How its nodes get their configuration: "push" (the controller's Ansible over SSH, at `up`
    # and after) or "boot" (each node configures itself at first boot from its pinned
    # artifact: an autoscaling group's nodes, which join long after `up`).
    configured: str = "push"
    # AWS: how the group's capacity is bought (its own market, else the target's) and the
    # capacity reservation or block it launches into (None: none).
    market: str | None = None
    reservation_id: str | None = None

    @property
    def reserved(self) -> bool:
        """Its capacity was bought beforehand (a capacity block or reservation): it launches
        where that capacity is, never into a placement group the stack creates."""
        return self.reservation_id is not None

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
class Offer:
    """A node the target can run instead, for right-sizing: `gpus` x GPU model `gpu`, as the
    target names it (`label`: e.g. AWS's instance type, or "8 x L40S" for a server)."""

    label: str
    gpu: str
    gpus: int


@dataclass(frozen=True)
class RackPlan:
    name: str
    power_kw: float
    gpu_kw: float  # GPU power planned into the rack (catalog watts x GPUs of its hosts)


@dataclass(frozen=True)
class Basis:
    """One cluster in one environment as compile first makes it: what every derived fact of
    the plan is computed from."""

    effective: Effective = field(repr=False, compare=False)
    name: str
    environment: str
    stack: str
    digest: str
    purpose: str
    owner: str
    target: Any  # the target's schema model (AwsTarget, BareMetalTarget, ColocationTarget)
    target_plan: Any  # what the target's compiler derived (frozen; e.g. the AWS subnets)
    # The machine image the nodes boot, as a promotion pins it (empty: hosts that exist, whose
    # OS the host checks record).
    image_pin: Mapping[str, str]
    node_groups: tuple[NodeGroupPlan, ...]
    racks: tuple[RackPlan, ...]
    network: NetworkSpec
    checkpoint: CheckpointStorage
    shared: SharedStorage | None  # the data tier every node mounts, if any
    object_tier: ObjectStorage | None  # where checkpoints are copied (storage.object), if set
    software: SoftwareSpec
    workload: WorkloadSpec | None
    validation: ValidationSpec
    lifecycle: LifecycleSpec
    image: ImageSpec | None  # the blueprint's `image` section (with the target's fields), if any
    waivers: Mapping[str, str]  # finding code -> the blueprint's reason for accepting it
    tags: tuple[tuple[str, str], ...]
    ssh_user: str
    fabrics: tuple[str, ...]  # the network fabrics the target offers
    nodes_listed: bool  # the blueprint lists the nodes (else the stack's outputs name them)
    owned: bool  # the target's hardware is bought outright (bare metal, colocation)
    on_demand: bool  # capacity rented by the hour with no commitment
    scheduler: SchedulerPlan | None  # None: no scheduler on the cluster
    # Every GPU node's NVLink domain and the fabric's switches (`rackform.plan.topology`).
    topology: TopologyPlan
    promoted_from: str | None  # the environment this one takes the blueprint from by promotion
    stack_config: Mapping[str, str]  # what `Pulumi.<stack>.yaml` holds
    project: Path | None = field(compare=False)  # the Pulumi project (Pulumi.yaml), if any
    directory: Path = field(compare=False)  # the blueprint file's directory (its siblings' stacks)
    # Every environment of the blueprints beside this one (`repository.siblings`).
    siblings: tuple[Effective, ...] = field(repr=False, compare=False)
    figures: PreflightFigures = field(repr=False, compare=False)
    catalog: Catalog = field(repr=False, compare=False)
    offers: tuple[Offer, ...] = field(repr=False, compare=False)  # the target's, for right-sizing

    @property
    def source(self) -> str:
        return self.effective.source

    @property
    def target_type(self) -> str:
        return self.target.type

    @property
    def baked(self) -> bool:
        """The nodes launch from a node image the stack bakes (`image.bake`)."""
        return self.image is not None and self.image.bake

    @property
    def training(self) -> bool:
        return self.purpose == "training"

    @property
    def nodes(self) -> int:
        return sum(g.count for g in self.node_groups)

    @property
    def gpus(self) -> int:
        return sum(g.gpus for g in self.node_groups)

    @property
    def checkpoint_tier(self) -> str | None:
        """Where checkpoints are copied as jobs write them (each job, each validation under its
        own prefix): `storage.object`'s URL, else the `checkpoints` directory of a shared tier
        that holds them, else nowhere."""
        if self.object_tier is not None:
            return self.object_tier.url
        if self.shared is not None and "checkpoints" in self.shared.holds:
            return f"{self.shared.mount}/checkpoints"
        return None

    @property
    def data_stack(self) -> str | None:
        """The stack that holds the data tier apart from the cluster's, `<stack>-data`: where the
        stack creates the shared file system and keeps it on destroy (storage.shared `fsx` or
        `efs` with no `file_system_id` and `retain: true`), with the network it lives in.
        `rackform destroy` (and reap's) destroy the cluster's stack only. None: no such tier (no
        shared tier, a server of a site's, one named by id, or one that goes with the cluster)."""
        tier = self.shared and (self.shared.fsx or self.shared.efs)
        if not tier or tier.file_system_id or not tier.retain:
            return None
        return f"{self.stack}{DATA_STACK_SUFFIX}"

    @property
    def data_stack_config(self) -> dict[str, str]:
        """The data stack's config: the cluster's, and the tier it builds (`rackform:tier`)."""
        return {**self.stack_config, TIER_KEY: "data"}

    @property
    def tier_endpoint(self) -> str | None:
        """The S3 endpoint of a checkpoint tier that is a site's S3-compatible store."""
        return self.object_tier.endpoint_url if self.object_tier is not None else None

    @property
    def node_range(self) -> tuple[int, int]:
        """How many nodes configuration must find and validation must hear from, as (low, high):
        the count, or for an autoscaling group anything between its minimum and maximum (the
        autoscaler owns the live size). The stack's Configure stage and promotion's check of the
        evidence read this one figure."""
        return sum(g.min_nodes for g in self.node_groups), sum(
            g.max_nodes for g in self.node_groups
        )

    @property
    def gpu_nodes(self) -> int:
        """Nodes with GPUs."""
        return sum(g.count for _, g in self.gpu_groups)

    @property
    def tag_map(self) -> dict[str, str]:
        return dict(self.tags)

    @property
    def gpu_groups(self) -> tuple[tuple[int, NodeGroupPlan], ...]:
        """(index in node_groups, group) for every group with GPUs and nodes."""
        return tuple((i, g) for i, g in enumerate(self.node_groups) if g.has_gpus)

    @property
    def writing_groups(self) -> tuple[NodeGroupPlan, ...]:
        """The groups whose nodes write checkpoints: those with GPUs (the testbed's CPU-only
        nodes where there are none); a parked group (count: 0) writes nothing."""
        return tuple(g for _, g in self.gpu_groups) or tuple(
            g for g in self.node_groups if g.count > 0
        )

    def usable_gb(self, gpu: GpuModel) -> float:
        """One GPU's memory less the catalog's reserve."""
        return usable_gb(gpu, self.figures.memory)


@dataclass(frozen=True)
class Plan(Basis):
    """One cluster in one environment, compiled: its basis and every fact derived from it."""

    sizing: Sizing
    # A training plan's checkpoint interval against the best one (None: nothing checkpointed).
    interval: CheckpointInterval | None
    cost: Cost
    group_expectations: Mapping[str, Expectations]  # each node group's smoke run, by name
    inventory: Mapping[str, Any]  # Ansible inventory (AWS groups empty until the nodes exist)
    group_vars: Mapping[str, Any]  # the roles' variables
    # What the cloud says of the capacity the groups launch into (AWS's reservations and
    # capacity blocks), observed at `up` for preflight's capacity rules; None in every offline
    # command, which reads nothing from the cloud.
    capacity: Any = field(default=None, compare=False)
    # Each GPU node group's serving node on paper (an inference workload; empty otherwise).
    decode: tuple[DecodeBound, ...] = ()

    @property
    def expectations(self) -> Expectations | None:
        """The cluster-wide smoke run's: its one node group's; None with several groups (one
        job across different groups has no single set)."""
        return cluster_expectations(self.group_expectations)


def cluster_expectations(by_group: Mapping[str, Expectations]) -> Expectations | None:
    """A cluster's one smoke run: its node group's expectations, when it has one group."""
    each = tuple(by_group.values())
    return each[0] if len(each) == 1 else None
