"""What a smoke run and the host checks expect of the nodes, each threshold with where it came
from: the value `rackform.plan.thresholds` derives and the compiled plan carries (its own module
so the plan's model can hold it without importing the rules that compute it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Threshold:
    value: float | None
    source: str  # where the value came from, or why there is none

    def arg(self, flag: str) -> list[str]:
        return [flag, f"{self.value:g}"] if self.value is not None else []


@dataclass(frozen=True)
class Expectations:
    group: str | None
    # The nodes the run must cover (node_count expects it; the all-reduce floor is for it):
    # the node group's count in the environment unless the caller says otherwise. None: no
    # blueprint, so nothing declares a count.
    nodes: int | None
    gpus_per_node: int | None
    gpu_model: str | None
    gpu_pattern: str | None
    fabric: str | None
    nccl: str | None
    peak_tflops: Threshold
    allreduce_busbw_gbps: Threshold
    mfu_pct: Threshold
    checkpoint_write_gbps: Threshold
    storage_write_gbps: Threshold
    loss_drop_fraction: Threshold
    smoke_steps: int | None = None
    dcgm_level: int = 1
    checkpoint_dir: str | None = None
    # The shared tier (storage.shared): its mount, the datasets directory the read check reads,
    # and what each node must read (GB/s).
    shared_mount: str | None = None
    shared_read_dir: str | None = None
    shared_read_gbps: Threshold = Threshold(None, "no shared tier")
    # The GPUs' links (the catalog's): NVLinks up on each GPU, the PCIe generation each runs
    # at, and whether the node's GPUs talk through NVSwitches (the fabric manager must run).
    # Where the smoke job copies its checkpoint (object storage, or the shared tier), and the
    # S3 endpoint of a store that is not AWS's.
    checkpoint_tier: str | None = None
    tier_endpoint: str | None = None
    nvlinks: int | None = None
    pcie_gen: int | None = None
    fabric_manager: bool = False
    # The NVLink domains the smoke job measures (name, its nodes), and the catalog's figures
    # for a full domain of the system (rackform/plan/domain_expect.py); none: not measured.
    nvlink_domains: tuple[tuple[str, tuple[str, ...]], ...] = ()
    domain_allreduce_gbps: Threshold = Threshold(None, "no NVLink domains to measure")
    domain_alltoall_gbps: Threshold = Threshold(None, "no NVLink domains to measure")

    def threshold_args(self) -> list[str]:
        """The expectations and thresholds as `validators.smoke` arguments: the end of the job's
        command line (`acceptance.argv` builds the whole; the smoke_train role is
        handed these, since it counts the nodes of the run itself)."""
        out: list[str] = []
        if self.gpus_per_node is not None:
            out += ["--expect-gpus", str(self.gpus_per_node)]
        for flag, v in (
            ("--expect-gpu-model", self.gpu_model),
            ("--expect-gpu-pattern", self.gpu_pattern),
            ("--expect-fabric", self.fabric),
            ("--expect-nccl", self.nccl),
        ):
            out += [flag, v] if v else []
        out += self.peak_tflops.arg("--peak-tflops")
        out += self.mfu_pct.arg("--mfu-min")
        out += self.allreduce_busbw_gbps.arg("--busbw-min")
        out += self.checkpoint_write_gbps.arg("--checkpoint-write-min")
        out += self.loss_drop_fraction.arg("--loss-drop")
        out += ["--object-tier", self.checkpoint_tier] if self.checkpoint_tier else []
        out += ["--tier-endpoint", self.tier_endpoint] if self.tier_endpoint else []
        for name, nodes in self.nvlink_domains:
            out += ["--nvlink-domain", f"{name}={','.join(nodes)}"]
        if self.nvlink_domains:
            out += self.domain_allreduce_gbps.arg("--domain-allreduce-min")
            out += self.domain_alltoall_gbps.arg("--domain-alltoall-min")
        return out

    def gpu_args(self) -> list[str]:
        """What `validators.hostcheck` expects of the node's GPUs and their links: also what
        Slurm's health check between jobs runs with (the slurm role's health_check.sh)."""
        out = []
        if self.gpus_per_node is not None:
            out += ["--expect-gpus", str(self.gpus_per_node)]
        out += ["--expect-nvlinks", str(self.nvlinks)] if self.nvlinks else []
        out += ["--expect-pcie-gen", str(self.pcie_gen)] if self.pcie_gen else []
        out += ["--expect-fabric-manager"] if self.fabric_manager else []
        return out

    def host_args(self) -> list[str]:
        """Arguments for `validators.hostcheck`."""
        out = ["--dcgm-level", str(self.dcgm_level), *self.gpu_args()]
        out += self.storage_write_gbps.arg("--storage-min-gbps")
        if self.shared_mount:
            out += ["--shared-mount", self.shared_mount]
            out += ["--shared-read-dir", self.shared_read_dir] if self.shared_read_dir else []
            out += self.shared_read_gbps.arg("--shared-read-min-gbps")
        return out

    def table(self) -> list[tuple[str, float | None, str]]:
        domains = (
            (
                ("domain_allreduce_gbps", self.domain_allreduce_gbps),
                ("domain_alltoall_gbps", self.domain_alltoall_gbps),
            )
            if self.nvlink_domains
            else ()
        )
        return [
            (name, t.value, t.source)
            for name, t in (
                ("peak_tflops", self.peak_tflops),
                ("allreduce_busbw_gbps", self.allreduce_busbw_gbps),
                ("mfu_pct", self.mfu_pct),
                ("checkpoint_write_gbps", self.checkpoint_write_gbps),
                ("storage_write_gbps", self.storage_write_gbps),
                ("shared_read_gbps", self.shared_read_gbps),
                ("loss_drop_fraction", self.loss_drop_fraction),
                *domains,
            )
        ]
