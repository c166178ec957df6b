"""What a serving node can do on paper: one decode step and one prefill at the workload's load,
bounded by the node's HBM bandwidth and dense BF16 peak (the catalog's), per GPU node group.

Serving runs one replica per node, its weights and KV cache spread over the node's GPUs, so
each decode step reads every weight once and, at the load's last step, the KV cache of every
sequence at full length (`ServingMemory.total_gb`): it takes at least those bytes over the
node's HBM bandwidth, and at least 2 x parameters x concurrency FLOPs over its peak. Decoding
is bound by the first unless the batch is large. The bound is a floor on the inter-token
latency and a ceiling on the decode rate (100% memory-bandwidth utilization): the serving smoke
job measures how close a node comes. A prefill of every request's prompt at once takes at
least 2 x parameters x prompt x concurrency FLOPs over the peak: a floor on the p99 time to
first token. Pure arithmetic over the plan's sizing and the catalog; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rackform.catalog import GpuModel
from rackform.catalog.preflight import ServingFigures
from rackform.plan.pricing import src
from rackform.plan.sizing import GB, ServingMemory


@dataclass(frozen=True)
class DecodeBound:
    """One GPU node group's serving node, on paper."""

    group: str
    gpu: str  # the catalog's GPU model
    gpus_per_node: int
    hbm_tbps: float  # the node's: its GPUs' HBM bandwidth together
    bytes_per_step: float  # weights + the full-length KV cache of every sequence
    step_ms: float  # one decode step at the load: the larger of the two bounds
    bandwidth_ms: float  # bytes_per_step over the node's HBM bandwidth
    compute_ms: float  # the step's FLOPs over the node's dense BF16 peak
    prefill_ms: float  # every prompt of the load prefilled at once, at peak
    concurrency: int
    source: str  # the catalog figures the bound reads

    @property
    def tokens_per_s(self) -> float:
        """Output tokens the node generates per second at most: a token per sequence a step."""
        return self.concurrency / (self.step_ms / 1000)

    @property
    def bound_by(self) -> str:
        return "HBM bandwidth" if self.bandwidth_ms >= self.compute_ms else "compute"


def decode_bounds(
    groups: Iterable[tuple[str, GpuModel, int]], serving: ServingMemory | None, f: ServingFigures
) -> tuple[DecodeBound, ...]:
    """Each GPU node group's bound (`groups`: name, GPU model and GPUs per node of each group
    with GPUs); none without a serving workload."""
    if serving is None:
        return ()
    flops_per_token = f.forward_flops_per_param_token
    load = serving.load
    out = []
    for name, gpu, gpus_per_node in groups:
        bandwidth = gpus_per_node * gpu.hbm_tbps.value * 1e12  # bytes/s
        peak = gpus_per_node * gpu.bf16_dense_tflops.value * 1e12  # FLOP/s
        step_bytes = serving.total_gb * GB
        step_flops = flops_per_token.value * serving.params * load.concurrency
        prefill_flops = step_flops * load.prompt_tokens
        bw_ms, compute_ms = step_bytes / bandwidth * 1000, step_flops / peak * 1000
        out.append(
            DecodeBound(
                group=name,
                gpu=gpu.key,
                gpus_per_node=gpus_per_node,
                hbm_tbps=bandwidth / 1e12,
                bytes_per_step=step_bytes,
                step_ms=max(bw_ms, compute_ms),
                bandwidth_ms=bw_ms,
                compute_ms=compute_ms,
                prefill_ms=prefill_flops / peak * 1000,
                concurrency=load.concurrency,
                source=src(gpu.hbm_tbps, gpu.bf16_dense_tflops, flops_per_token),
            )
        )
    return tuple(out)
