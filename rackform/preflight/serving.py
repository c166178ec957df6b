"""Serving rules: can each serving node sustain the load the blueprint states, on paper?

- Memory: one replica's weights plus the KV cache of `concurrency` sequences at full length
  (from the model's layers, KV heads and head size: grouped-query attention divides it) must
  fit the node's GPU memory less the reserve.
- Inter-token latency: a decode step reads the weights and that KV cache once, so it takes at
  least those bytes over the node's HBM bandwidth (and its FLOPs over the node's peak); a p99
  objective below that cannot be met (`rackform.plan.decode`).
- Time to first token: every prompt of the load prefilled at once takes at least its FLOPs
  over the node's peak; a p99 objective below that cannot be met.

The rules run where the workload states its load (`workload.serving`); without it the
right-sizing rules' estimate (`inference-kv-cache-tight`) stands.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from rackform.plan.model import Plan
from rackform.plan.sizing import GB
from rackform.preflight.base import Finding, Rule, gb, group_path

LOAD = ("workload", "serving")


def _groups(plan: Plan):
    """(index, group, its decode bound) of each serving node group, where the load is stated."""
    w, s = plan.workload, plan.sizing.serving
    if s is None or w is None or w.serving is None:
        return
    bounds = {d.group: d for d in plan.decode}
    for i, g in plan.gpu_groups:
        if g.name in bounds:
            yield i, g, bounds[g.name]


def _kv_words(plan: Plan) -> str:
    s = plan.sizing.serving
    assert s is not None
    d = s.dims
    gqa = (
        f", grouped-query {d.attention_heads}/{d.kv_heads}"
        if d.kv_heads < d.attention_heads
        else ""
    )
    return (
        f"{d.layers} layers x {d.kv_heads} KV heads x {d.head_size} x 2 (K and V) x "
        f"{d.dtype_bytes:g} bytes{gqa}"
    )


class ServingMemoryDoesNotFit(Rule):
    code = "serving-memory-does-not-fit"

    def check(self, plan: Plan) -> Iterable[Finding]:
        s = plan.sizing.serving
        for i, g, _ in _groups(plan):
            usable = g.gpus_per_node * plan.usable_gb(g.gpu)
            if s.weights_gb > usable or s.total_gb <= usable:
                continue  # weights alone: inference-node-too-small says so
            load = s.load
            per_seq = s.dims.kv_bytes_per_token * load.context_tokens / GB
            fits = math.floor((usable - s.weights_gb) / per_seq) if per_seq else 0
            yield self.finding(
                (*LOAD, "concurrency")
                if plan.workload.serving.concurrency
                else group_path(plan, i),
                f"{gb(s.weights_gb)} of weights plus {gb(s.kv_cache_gb)} of KV cache for "
                f"{load.concurrency} x {load.context_tokens}-token sequences ({_kv_words(plan)} "
                f"per token) exceed the {gb(usable)} a node of {g.gpus_per_node} x {g.gpu.key} "
                "holds",
                f"serve at most {fits} sequences at once per node (workload.serving.concurrency),"
                " shorten them, or choose a node with more GPU memory",
            )


class ServingItlUnreachable(Rule):
    code = "serving-itl-unreachable"

    def check(self, plan: Plan) -> Iterable[Finding]:
        s = plan.sizing.serving
        for _, g, d in _groups(plan):
            want = s.load.itl_p99_ms
            if want is None or d.step_ms <= want:
                continue
            yield self.finding(
                (*LOAD, "itl_p99_ms"),
                f"one decode step of {d.concurrency} sequences on {g.gpus_per_node} x {g.gpu.key} "
                f"reads {gb(d.bytes_per_step / GB)} (weights plus the full-length KV cache) at "
                f"{d.hbm_tbps:g} TB/s of HBM bandwidth: at least {d.step_ms:.1f} ms, bound by "
                f"{d.bound_by}, above the p99 inter-token latency objective of {want:g} ms",
                "lower workload.serving.concurrency or the sequence length, serve in fp8 "
                "(workload.model.dtype), or use GPUs with more HBM bandwidth; the node never "
                "reaches 100% of its bandwidth, so leave room",
            )


class ServingTtftUnreachable(Rule):
    code = "serving-ttft-unreachable"

    def check(self, plan: Plan) -> Iterable[Finding]:
        s = plan.sizing.serving
        for _, g, d in _groups(plan):
            want = s.load.ttft_p99_ms
            if want is None or d.prefill_ms <= want:
                continue
            yield self.finding(
                (*LOAD, "ttft_p99_ms"),
                f"prefilling {d.concurrency} prompts of {s.load.prompt_tokens} tokens at once on "
                f"{g.gpus_per_node} x {g.gpu.key} takes at least {d.prefill_ms:,.0f} ms at the "
                f"GPUs' dense BF16 peak, above the p99 time-to-first-token objective of "
                f"{want:g} ms",
                "lower workload.serving.concurrency or prompt_tokens, or use more or faster GPUs",
            )


RULES: tuple[Rule, ...] = (
    ServingMemoryDoesNotFit(),
    ServingItlUnreachable(),
    ServingTtftUnreachable(),
)
