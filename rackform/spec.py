"""The compiled plan: frozen, pure values that Pulumi components and Ansible inventories are
built from. Nothing here does I/O; every decision that needs the catalog was made in compile."""

from __future__ import annotations

from dataclasses import dataclass

from rackform.schema.sections import (
    CheckpointStorage,
    LifecycleSpec,
    NetworkSpec,
    SoftwareSpec,
    ValidationSpec,
    WorkloadSpec,
)
from rackform.schema.target import AwsTarget, BareMetalTarget, ColocationTarget


@dataclass(frozen=True)
class HostSpec:
    name: str
    address: str
    port: int
    rack: str | None
    nvme: tuple[str, ...]


@dataclass(frozen=True)
class NodeGroupSpec:
    name: str
    count: int
    gpu: str | None  # catalog key, None for CPU-only hosts (the local testbed)
    gpus_per_node: int
    instance_type: str | None  # AWS only
    hosts: tuple[HostSpec, ...]  # bare metal / colocation only
    min_count: int | None
    max_count: int | None
    efa_interfaces: int  # EFA interfaces the launch template attaches (0 without EFA)
    nvme_drives: int  # instance-store drives on AWS; listed drives (or 0 = discover) on-prem

    @property
    def gpus(self) -> int:
        return self.count * self.gpus_per_node


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    environment: str
    stack: str
    digest: str
    source: str
    purpose: str
    owner: str
    target: AwsTarget | BareMetalTarget | ColocationTarget
    node_groups: tuple[NodeGroupSpec, ...]
    network: NetworkSpec
    checkpoint: CheckpointStorage
    software: SoftwareSpec
    workload: WorkloadSpec | None
    validation: ValidationSpec
    lifecycle: LifecycleSpec
    tags: tuple[tuple[str, str], ...]

    @property
    def nodes(self) -> int:
        return sum(g.count for g in self.node_groups)

    @property
    def gpus(self) -> int:
        return sum(g.gpus for g in self.node_groups)

    @property
    def tag_map(self) -> dict[str, str]:
        return dict(self.tags)
