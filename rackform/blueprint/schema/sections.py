"""Blueprint sections other than the target: what node groups share, network, storage, software,
workload, validation and lifecycle."""

from __future__ import annotations

import re
from typing import Annotated, Literal, get_args

from pydantic import Field, field_validator, model_validator

from rackform.blueprint.schema.base import Strict, Violation, check
from rackform.blueprint.schema.health import HealthPolicy
from rackform.blueprint.schema.names import AbsolutePath, Drive, Hca, Interface
from rackform.blueprint.schema.object_tier import ObjectStorage
from rackform.blueprint.schema.rollout import (
    BUDGET_DESCRIPTION,
    RolloutPolicy,
    budget,
    parse_budget,
)
from rackform.blueprint.schema.serving import ModelShape, ServingLoad, load_rules
from rackform.blueprint.schema.shared import SharedStorage
from rackform.catalog.raid import load_raid_levels

Name = Annotated[str, Field(pattern=r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")]

# The inter-node fabrics, written once. Preflight and the thresholds read RDMA_FABRICS; the
# copies that cannot import rackform (validators.args' --expect-fabric, the nccl_rdma role's
# argument spec and per-fabric settings) are checked against FABRICS by tests.
RdmaFabric = Literal["efa", "infiniband", "roce"]
Fabric = Literal[RdmaFabric, "ethernet"]
FABRICS: tuple[str, ...] = get_args(Fabric)
RDMA_FABRICS: tuple[str, ...] = get_args(RdmaFabric)

# The md RAID levels a blueprint may ask for are the catalog's table (catalog/raid.yaml), so a
# level is never accepted that preflight, the plan or the nvme_raid role has no row for.
RaidLevelChoice = Literal[tuple(sorted(load_raid_levels()))]  # type: ignore[valid-type]


class NodeGroup(Strict):
    """What a node group has on every target. Each target adds its own fields (AWS its
    instance type and autoscaling bounds, bare metal and colocation their hosts): the node group
    a blueprint validates is assembled from these in `rackform.blueprint.schema.model`."""

    name: Annotated[Name, Field(description="Group name; environments merge node groups by it.")]
    count: Annotated[
        int | None,
        Field(
            description="Nodes in the group. On AWS required; on bare metal it defaults to the hosts listed.",
            ge=0,
            le=4096,
        ),
    ] = None
    gpu: Annotated[
        str | None,
        Field(description="GPU model from the catalog. On AWS it comes from the instance type."),
    ] = None
    gpus_per_node: Annotated[
        int | None,
        Field(description="GPUs per node. On AWS it comes from the instance type.", ge=0, le=16),
    ] = None
    system: Annotated[
        str | None,
        Field(
            description="The GPU system from the catalog (HGX-B200, GB200-NVL72, ...): how the nodes make NVLink domains (a rack-scale system's trays join one domain). Default: the only system the GPU model is sold in, else none (each node its own domain)."
        ),
    ] = None


class NetworkSpec(Strict):
    fabric: Annotated[
        Fabric,
        Field(description="Inter-node fabric for NCCL traffic."),
    ]
    interfaces: Annotated[
        tuple[Interface, ...],
        Field(description="NCCL socket interfaces (NCCL_SOCKET_IFNAME); empty = auto."),
    ] = ()
    hcas: Annotated[
        tuple[Hca, ...], Field(description="InfiniBand / RoCE HCAs (NCCL_IB_HCA), e.g. mlx5_0.")
    ] = ()
    gbps_per_node: Annotated[
        float | None, Field(description="Fabric bandwidth per node in Gb/s, when known.", gt=0)
    ] = None


class CheckpointStorage(Strict):
    raid_level: Annotated[RaidLevelChoice, Field(description="md RAID level.")] = 0
    mount: Annotated[AbsolutePath, Field(description="Absolute mount path for checkpoints.")] = (
        "/mnt/checkpoints"
    )
    filesystem: Annotated[Literal["xfs", "ext4"], Field(description="Filesystem on the array.")] = (
        "xfs"
    )
    devices: Annotated[
        tuple[Drive, ...],
        Field(
            description="Drives by serial or /dev/disk/by-id name; empty uses every instance-store / unused NVMe drive."
        ),
    ] = ()
    write_gbps: Annotated[
        float | None,
        Field(
            description="Expected sequential write GB/s of the array; defaults from the catalog on AWS.",
            gt=0,
        ),
    ] = None
    allow_wipe: Annotated[
        bool,
        Field(
            description="Allow formatting drives that already hold a filesystem or partition table."
        ),
    ] = False

    @field_validator("mount")
    @classmethod
    def _mount(cls, v: str) -> str:
        if v in ("/", "/boot", "/usr", "/var", "/etc") or ".." in v.split("/"):
            raise ValueError(
                f"{v!r} is not a safe checkpoint mount; use a dedicated path such as /mnt/checkpoints"
            )
        return v.rstrip("/") or v


class StorageSpec(Strict):
    checkpoint: Annotated[
        CheckpointStorage, Field(description="Local NVMe RAID for checkpoints.")
    ] = CheckpointStorage()
    shared: Annotated[
        SharedStorage | None,
        Field(
            description="The data tier every node mounts: datasets, checkpoints that outlive a node, home (rackform/blueprint/schema/shared.py)."
        ),
    ] = None
    object: Annotated[
        ObjectStorage | None,
        Field(
            description="Checkpoints copied to object storage in the background (rackform/blueprint/schema/object_tier.py)."
        ),
    ] = None

    @model_validator(mode="after")
    def _mounts(self) -> StorageSpec:
        if self.shared is not None and self.shared.mount == self.checkpoint.mount:
            check([Violation(
                ("shared", "mount"),
                f"{self.shared.mount} is the checkpoint array's mount too",
                "mount the shared file system elsewhere, e.g. /shared",
            )])  # fmt: skip
        return self


_DOTTED = re.compile(r"^\d+(\.\d+){0,2}$")


class SoftwareSpec(Strict):
    driver_branch: Annotated[
        str,
        Field(description='NVIDIA driver branch, e.g. "550".', pattern=r"^\d{3}(-server|-open)?$"),
    ] = "550"
    cuda: Annotated[str, Field(description='CUDA version, e.g. "12.4".', pattern=r"^\d+\.\d+$")] = (
        "12.4"
    )
    nccl: Annotated[
        str, Field(description='NCCL version, e.g. "2.21.5".', pattern=r"^\d+\.\d+\.\d+$")
    ] = "2.21.5"
    dcgm: Annotated[
        str, Field(description='DCGM version, e.g. "3.3".', pattern=r"^\d+(\.\d+){0,2}$")
    ] = "3.3"
    torch: Annotated[
        str,
        Field(
            description="torch version the smoke job installs on the nodes.",
            pattern=r"^\d+\.\d+(\.\d+)?$",
        ),
    ] = "2.13.0"


class WorkloadSpec(Strict):
    model_params_b: Annotated[
        float, Field(description="Model size in billions of parameters.", gt=0, le=10000)
    ]
    method: Annotated[
        Literal["pretrain", "full", "lora", "qlora", "serve"],
        Field(
            description="What the cluster runs: pre-training, full fine-tune, LoRA, QLoRA (training) or serve (inference)."
        ),
    ]
    seq_len: Annotated[int, Field(description="Sequence length in tokens.", ge=1, le=1_048_576)] = (
        4096
    )
    micro_batch: Annotated[int, Field(description="Sequences per GPU per step.", ge=1)] = 1
    checkpoint_interval_min: Annotated[
        float | None, Field(description="Minutes between checkpoints (training).", gt=0)
    ] = None
    tokens_b: Annotated[float | None, Field(description="Training tokens, in billions.", gt=0)] = (
        None
    )
    expected_utilization_pct: Annotated[
        float | None,
        Field(
            description="Expected average GPU utilization over a run; the cost report prices the gap to 85%.",
            gt=0,
            le=100,
        ),
    ] = None
    activation_checkpointing: Annotated[
        bool,
        Field(
            description="Recompute activations in the backward pass (keeps only each layer's input); costs about 20-30% more compute for much less memory."
        ),
    ] = True
    sharding: Annotated[
        Literal["fsdp", "ddp"],
        Field(
            description="fsdp: weights, gradients and optimizer state are sharded over every GPU (FSDP / ZeRO-3) and each node writes its own checkpoint shard; ddp: every GPU holds a full replica (divided only by tensor_parallel) and one rank writes checkpoints."
        ),
    ] = "fsdp"
    tensor_parallel: Annotated[
        int,
        Field(
            description="Tensor-parallel degree; it exchanges activations every layer and needs NVLink-class bandwidth, so tensor_parallel x expert_parallel must fit inside one NVLink domain (a node's GPUs on HGX, 72 GPUs on an NVL72).",
            ge=1,
            le=72,
        ),
    ] = 1
    expert_parallel: Annotated[
        int,
        Field(
            description="Expert-parallel degree of a mixture-of-experts model; its all-to-all runs inside the tensor x expert group, which must fit one NVLink domain.",
            ge=1,
            le=72,
        ),
    ] = 1
    global_batch: Annotated[
        int | None,
        Field(
            description="Sequences per optimizer step; with micro_batch it bounds how many data-parallel GPUs the job can use.",
            ge=1,
        ),
    ] = None
    min_nodes: Annotated[
        int | None,
        Field(
            description="Elastic training: the fewest nodes a job may go on with after losing some (torchrun's --nnodes MIN, through $RACKFORM_MIN_NODES from the Slurm prolog); a job with fewer stops. Unset: every node, no elastic continuation.",
            ge=1,
            le=4096,
        ),
    ] = None
    checkpoint_contents: Annotated[
        Literal["full", "weights"],
        Field(
            description="full: weights plus optimizer state (resumable training; the default); weights: model weights only (LoRA / QLoRA: the adapters only, either way)."
        ),
    ] = "full"
    checkpoint_async: Annotated[
        bool,
        Field(
            description="The checkpoint is written off the training path (e.g. torch.distributed.checkpoint's async_save): training waits only for each GPU's shard copied to host memory, and that copy is what the checkpoint interval is computed from."
        ),
    ] = False
    checkpoints_retained: Annotated[
        int,
        Field(
            description="Checkpoints kept at once; sizes the array's capacity check and the storage cost.",
            ge=1,
            le=1000,
        ),
    ] = 3
    read_bytes_per_token: Annotated[
        float,
        Field(
            description="Bytes the data loader reads from storage per training token: 4 for tokenized text stored as uint32 ids (2 as uint16); far more for images or video (a 150 KB image encoded as 256 tokens is about 600). With storage.shared holding datasets, the data-loading check multiplies it by the tokens the GPUs consume.",
            gt=0,
            le=1_000_000,
        ),
    ] = 4
    model: Annotated[
        ModelShape | None,
        Field(
            description="The model's shape (layers, hidden size, attention and KV heads, head size, dtype), as its config states it; sizes serving's weights and KV cache. Default: estimated from model_params_b, bf16, as many KV heads as attention heads (no grouped-query attention: the most KV cache a model of that size needs)."
        ),
    ] = None
    serving: Annotated[
        ServingLoad | None,
        Field(
            description="method serve: the load each node must sustain (concurrency, prompt and output tokens) and the p99 latency objectives (time to first token, inter-token latency) the serving smoke job judges and preflight checks on paper. Default: micro_batch sequences of seq_len tokens, no objectives."
        ),
    ] = None

    @model_validator(mode="after")
    def _serving(self) -> WorkloadSpec:
        if self.serving is None:
            return self
        if self.method != "serve":
            check([Violation(
                ("serving",),
                f"a serving load on a {self.method} workload",
                "remove workload.serving, or use method: serve on an inference blueprint",
            )])  # fmt: skip
        check(load_rules(self.serving, self.seq_len))
        return self


class Thresholds(Strict):
    allreduce_busbw_gbps: Annotated[
        float | None,
        Field(
            description="Minimum all-reduce bus bandwidth (GB/s); default from the catalog.", gt=0
        ),
    ] = None
    mfu_pct: Annotated[
        float | None, Field(description="Minimum model FLOPs utilization.", gt=0, le=100)
    ] = None
    checkpoint_write_gbps: Annotated[
        float | None, Field(description="Minimum checkpoint write GB/s.", gt=0)
    ] = None
    shared_read_gbps: Annotated[
        float | None,
        Field(
            description="What each node must read from the shared tier (GB/s); default: what its GPUs consume (tokens/s at the catalog's MFU x workload.read_bytes_per_token).",
            gt=0,
        ),
    ] = None
    loss_drop_fraction: Annotated[
        float,
        Field(description="Loss must fall by at least this fraction of its start.", gt=0, lt=1),
    ] = 0.2


class ValidationSpec(Strict):
    smoke_steps: Annotated[
        int, Field(description="Training steps of the smoke job.", ge=5, le=100_000)
    ] = 50
    strict: Annotated[bool, Field(description="A failed check fails `pulumi up`.")] = True
    dcgm_diag_level: Annotated[
        Literal[1, 2, 3], Field(description="dcgmi diag level: r1 seconds, r2 ~2 min, r3 ~15 min.")
    ] = 1
    thresholds: Annotated[
        Thresholds, Field(description="Overrides of the catalog's thresholds.")
    ] = Thresholds()


# What `rackform reap --apply` may do to an idle cluster; which of them a target allows is the
# target's schema rule (`TargetSchema.idle_actions`).
IdleAction = Literal["notify", "destroy", "stop", "scale-to-zero", "power-off", "drain"]


class IdlePolicy(Strict):
    gpu_util_below_pct: Annotated[
        float, Field(description="A node counts as idle below this GPU utilization.", ge=0, le=100)
    ] = 10
    for_minutes: Annotated[
        int, Field(description="Idle for this long before the action.", ge=5)
    ] = 120
    action: Annotated[
        IdleAction,
        Field(
            description="What `rackform reap --apply` does: notify (every target); destroy (the AWS stack), stop (AWS training instances), scale-to-zero (AWS inference autoscaling groups with min_count 0); power-off (through each host's BMC) or drain (bare metal, colocation)."
        ),
    ] = "notify"
    stalled: Annotated[
        Literal["report", "act"],
        Field(
            description="A stalled job (GPU memory in use, ~0% utilization for the whole window): report only, or act on it like idle capacity."
        ),
    ] = "report"
    memory_in_use_mib: Annotated[
        float,
        Field(
            description="GPU framebuffer in use (MiB) above which a GPU holds a job; below it an unused GPU counts as idle, not stalled.",
            gt=0,
        ),
    ] = 1024
    scrape_interval_s: Annotated[
        int,
        Field(
            description="How often Prometheus scrapes dcgm-exporter (seconds; Prometheus's default global scrape_interval is 60). Coverage is counted against it: a GPU whose samples leave a gap longer than about four intervals in the window is unknown, never idle.",
            ge=1,
            le=600,
        ),
    ] = 60
    grace_minutes: Annotated[
        int,
        Field(
            description="Warn, then act: `rackform reap --apply` first notifies (Alertmanager or webhook) that the cluster is idle, and carries out the action only on a run at least this many minutes later, if the cluster stayed idle the whole time since. 0 acts at once. Not used by action: notify.",
            ge=0,
            le=10080,
        ),
    ] = 60
    force_off: Annotated[
        bool,
        Field(
            description="power-off: when a host has not reached Off within power_off_timeout_s of its graceful shutdown, ask its BMC for ForceOff. false: the host is reported as not off.",
        ),
    ] = False
    power_off_timeout_s: Annotated[
        int,
        Field(
            description="power-off: seconds to wait for each host's BMC to report PowerState Off after the shutdown request.",
            ge=1,
            le=3600,
        ),
    ] = 300


class LifecycleSpec(Strict):
    protect: Annotated[bool, Field(description="Never destroy or reap this cluster.")] = False
    utilization_alert_minutes: Annotated[
        int,
        Field(
            description="`rackform alerts`: a training cluster whose GPU utilization averages below the catalog's alert level (80%) over this many minutes alerts.",
            ge=5,
            le=1440,
        ),
    ] = 30
    mttr_alert_hours: Annotated[
        float,
        Field(
            description="`rackform alerts`: a cluster whose failed nodes took longer than this on average from detection to their return to service, over the last 7 days (`rackform metrics`' series, from heal's and the rolling changes' audit log), alerts.",
            gt=0,
            le=8760,
        ),
    ] = 24
    failures_alert_node_share: Annotated[
        float,
        Field(
            description="`rackform alerts`: a cluster with more node failures in a day than this share of its nodes (and more than one) alerts. The default, 2%, is about five times the rate of Meta's Llama 3 run: 419 unexpected interruptions in 54 days on 16,384 H100s, 2,048 nodes, about 0.4% of the nodes a day (arXiv 2407.21783, section 3.3.4).",
            gt=0,
            le=1,
        ),
    ] = 0.02
    idle: Annotated[
        IdlePolicy | None,
        Field(description="Idle policy for `rackform reap`; none = never reaped."),
    ] = None
    health: Annotated[
        HealthPolicy | None,
        Field(
            description="Health policy for `rackform heal`; none = heal judges every node with the default policy and reports, never acts."
        ),
    ] = None
    max_out_of_service: Annotated[int | str | None, Field(description=BUDGET_DESCRIPTION)] = None
    rollout: Annotated[
        RolloutPolicy,
        Field(
            description="How a software change that needs a drain reaches running nodes, batch by batch (`rackform configure --rolling`; `rackform diff` shows the batches)."
        ),
    ] = RolloutPolicy()

    @field_validator("max_out_of_service")
    @classmethod
    def _budget(cls, v: int | str | None) -> int | str | None:
        return parse_budget(v)

    def budget(self, nodes: int) -> int:
        """The most of `nodes` out of service at once (never less than one)."""
        return budget(self.max_out_of_service, nodes)
