"""Memory sizing rules: does the job fit the cluster's GPUs, and is the cluster far too big?

The arithmetic is in `rackform.plan.sizing`, computed once by compile (`Plan.sizing`): full
fine-tuning and pre-training in bf16 with AdamW hold 2 + 2 + 12 bytes per parameter plus
activations; LoRA holds a bf16 frozen base (QLoRA a 4-bit one) plus adapters with their own
gradients and optimizer state. Under `sharding: fsdp` the states are spread over every GPU;
under `ddp` each GPU holds them whole (divided only by tensor parallelism).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from rackform.plan.model import Plan
from rackform.preflight.base import Finding, Rule, gb, group_path


class MemoryDoesNotFit(Rule):
    code = "memory-does-not-fit"

    def check(self, plan: Plan) -> Iterable[Finding]:
        m, w = plan.sizing.memory, plan.workload
        if m is None or w is None:
            return
        reserve = plan.figures.memory.reserve_fraction.value
        for i, g in sorted(plan.gpu_groups, key=lambda t: plan.usable_gb(t[1].gpu)):
            model = g.gpu
            usable = plan.usable_gb(model)
            if m.per_gpu_gb <= usable:
                continue
            spread = (
                f"{gb(m.states_gb)} of weights, gradients and optimizer state over {m.shards} GPU(s)"
                if m.shards > 1
                else f"{gb(m.states_gb)} of weights, gradients and optimizer state"
            )
            yield self.finding(
                group_path(plan, i),
                f"{w.method} of a {w.model_params_b:g}B model needs {gb(m.per_gpu_gb)} per GPU "
                f"({spread}, plus {gb(m.activations_gb / m.tensor_parallel)} of activations) "
                f"but each {model.key} leaves {gb(usable)} of its {gb(model.memory_gb.value)} "
                f"({reserve:.0%} reserved)",
                "; ".join(self._fixes(plan, g.gpus_per_node, usable)),
            )
            return  # the smallest GPU is the one that matters

    @staticmethod
    def _fixes(plan: Plan, gpus_per_node: int, usable: float) -> list[str]:
        m, w = plan.sizing.memory, plan.workload
        assert m is not None and w is not None
        acts = m.activations_gb / m.tensor_parallel
        out = []
        if w.sharding == "ddp" and m.states_gb / max(plan.gpus, 1) + acts <= usable:
            out.append(f"set workload.sharding: fsdp to spread the state over all {plan.gpus} GPUs")
        if not w.activation_checkpointing:
            out.append("set workload.activation_checkpointing: true")
        if w.sharding == "fsdp" and usable > acts:
            need = math.ceil(m.states_gb / (usable - acts))
            nodes = math.ceil(need / max(gpus_per_node, 1))
            out.append(f"use at least {need} such GPUs ({nodes} node(s) of {gpus_per_node})")
        if acts > usable / 2:
            out.append("lower workload.micro_batch or seq_len, or raise tensor_parallel")
        if w.method in ("pretrain", "full"):
            out.append("or fine-tune with method: lora or qlora")
        elif w.method == "lora":
            out.append("or use method: qlora (4-bit frozen base)")
        return out or ["choose a GPU with more memory"]


class MemoryOversized(Rule):
    code = "memory-oversized"

    def check(self, plan: Plan) -> Iterable[Finding]:
        m, w = plan.sizing.memory, plan.workload
        if m is None or w is None or w.method == "pretrain":
            return  # pre-training buys GPUs for compute, not memory
        below = plan.figures.memory.oversized_below_fraction.value
        for i, g in plan.gpu_groups:
            model = g.gpu
            share = m.replica_gb / model.memory_gb.value
            if share >= below:
                continue
            cap = model.memory_gb.value
            smaller = sorted(
                (c for c in plan.catalog.gpus.values() if c.memory_gb.value < cap),
                key=lambda c: c.memory_gb.value,
            )
            fits = [c for c in smaller if plan.usable_gb(c) >= m.replica_gb]
            hint = f" (e.g. {fits[0].key}, {gb(fits[0].memory_gb.value)})" if fits else ""
            yield self.finding(
                group_path(plan, i),
                f"one whole replica of this {w.method} job needs {gb(m.replica_gb)}, "
                f"{share:.0%} of one {model.key}'s {gb(model.memory_gb.value)} "
                f"(below {below:.0%}): the cluster's GPUs are oversized for it",
                f"a GPU with less memory would hold it{hint}; or waive with the reason "
                "(e.g. the GPUs are bought for throughput)",
            )


class NodesUnused(Rule):
    code = "nodes-unused"

    def check(self, plan: Plan) -> Iterable[Finding]:
        w = plan.workload
        if not plan.training or w is None or w.global_batch is None or not plan.gpu_groups:
            return
        tp = w.tensor_parallel
        ranks = plan.gpus // tp
        usable_ranks = w.global_batch // w.micro_batch
        if ranks <= usable_ranks:
            return
        i, g = plan.gpu_groups[0]
        need_nodes = math.ceil(usable_ranks * tp / max(g.gpus_per_node, 1))
        yield self.finding(
            ("node_groups", i, "count"),
            f"{plan.gpus} GPUs at tensor_parallel {tp} make {ranks} data-parallel ranks, but "
            f"global_batch {w.global_batch} / micro_batch {w.micro_batch} gives work to "
            f"{usable_ranks}: {(ranks - usable_ranks) * tp} GPUs would sit idle",
            f"use {max(need_nodes, 1)} node(s), or raise workload.global_batch",
        )


RULES: tuple[Rule, ...] = (MemoryDoesNotFit(), MemoryOversized(), NodesUnused())
