"""Rules over the cluster's NVLink domains and fabric: a job that fills no whole number of
domains, and the gradients' all-reduce across domains against a step's compute."""

from __future__ import annotations

from collections.abc import Iterable

from rackform.plan.model import Plan
from rackform.preflight.base import Finding, Rule, gb


def ring_allreduce_s(grad_bytes: float, ranks: int, busbw_gbs: float) -> float:
    """Seconds a ring all-reduce of `grad_bytes` per rank over `ranks` takes at a bus bandwidth
    of `busbw_gbs` GB/s: each rank moves 2(n-1)/n of it, the factor by which nccl-tests turn an
    algorithm bandwidth into a bus bandwidth."""
    if ranks < 2:
        return 0.0
    return grad_bytes * 2 * (ranks - 1) / ranks / (busbw_gbs * 1e9)


class JobNotDomainMultiple(Rule):
    """The cluster's job over every GPU, larger than one domain: a whole number of full domains,
    else a part-filled domain's ranks talk over the fabric at a fraction of NVLink's speed."""

    code = "job-not-domain-multiple"

    def check(self, plan: Plan) -> Iterable[Finding]:
        domains = plan.topology.domains
        # Where every node is its own domain (HGX), any node count is whole domains.
        if plan.workload is None or not plan.training or not plan.topology.spans_nodes:
            return
        full = max(d.gpus for d in domains)
        short = [d for d in domains if d.gpus < full]
        if plan.gpus <= full or not short:
            return
        named = ", ".join(f"{d.name} ({d.gpus})" for d in short[:4])
        yield self.finding(
            ("node_groups",),
            f"the job's {plan.gpus} GPUs are {plan.gpus / full:.2f} NVLink domains of {full}: "
            f"{named} {'is' if len(short) == 1 else 'are'} not full, so the ranks there reach "
            "the others over the fabric only",
            f"use a multiple of {full} GPUs ({plan.gpus // full * full} or "
            f"{(plan.gpus // full + 1) * full}), or run the part-filled domain's nodes as jobs of their own",
        )


class AllreduceAcrossDomainsSlow(Rule):
    """Data parallelism's gradients cross the fabric once a step. Assumptions: dense bf16
    gradients (memory figures' bytes per parameter) of the parameters one tensor-parallel rank
    holds; one ring over the data-parallel ranks; its bus bandwidth bounded by a node's fabric
    bandwidth (network.gbps_per_node / 8: each ring crosses a node on one NIC, and the node's
    NICs carry its rings together); a step's compute at the cost figures' MFU. The step is
    workload.global_batch sequences (else micro_batch per data-parallel rank)."""

    code = "allreduce-across-domains-slow"

    def check(self, plan: Plan) -> Iterable[Finding]:
        w, net = plan.workload, plan.network
        if w is None or not plan.training or w.method in ("lora", "qlora", "serve"):
            return
        if net.gbps_per_node is None or len(plan.topology.domains) < 2 or not plan.gpu_groups:
            return
        gpus = plan.gpus
        ranks = gpus // w.tensor_parallel
        f, c = plan.figures, plan.figures.cost
        params = w.model_params_b * 1e9
        grads = params * f.memory.grads_bytes_per_param.value / w.tensor_parallel
        busbw = net.gbps_per_node / 8
        reduce_s = ring_allreduce_s(grads, ranks, busbw)
        sequences = w.global_batch or w.micro_batch * ranks
        peak = min(g.gpu.bf16_dense_tflops.value for _, g in plan.gpu_groups) * 1e12
        compute_s = (
            c.flops_per_param_token.value
            * params
            * sequences
            * w.seq_len
            / (gpus * peak * c.mfu_fraction.value)
        )
        limit = f.topology.allreduce_max_step_fraction.value
        if reduce_s <= limit * compute_s:
            return
        yield self.finding(
            ("network", "gbps_per_node"),
            f"the gradients' ring all-reduce across {len(plan.topology.domains)} NVLink domains "
            f"moves 2({ranks}-1)/{ranks} x {gb(grads / 1e9)} per rank at most {busbw:g} GB/s "
            f"({net.gbps_per_node:g} Gb/s a node): {reduce_s:.2f} s a step, longer than the "
            f"step's {compute_s:.2f} s of compute at {c.mfu_fraction.value:.0%} MFU, so every "
            "GPU waits on the fabric",
            "a faster fabric (more Gb/s a node), a larger global_batch (more compute a step), "
            "a larger tensor_parallel within a domain, or fsdp with gradient accumulation",
        )


RULES: tuple[Rule, ...] = (JobNotDomainMultiple(), AllreduceAcrossDomainsSlow())
