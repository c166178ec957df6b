"""Right-sizing rules: the interconnect and the node type match what the cluster will run.

- An RDMA fabric (EFA, InfiniBand, RoCE) is paid for by jobs that all-reduce large gradients
  across nodes: it buys nothing on one node, or for LoRA, whose data parallelism moves only the
  adapters' gradients.
- Multi-node pre-training or full fine-tuning without one stalls on every all-reduce.
- Tensor parallelism needs NVLink-class bandwidth, so it stays inside a node.
- Serving runs one replica per node: no training fabric, no NVSwitch GPUs for a model a cheaper
  node holds, and the node must hold the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from rackform.blueprint.schema.sections import RDMA_FABRICS as RDMA
from rackform.blueprint.schema.sections import WorkloadSpec
from rackform.blueprint.yamlmap import Path
from rackform.plan.model import Plan
from rackform.plan.sizing import GB, ServingMemory, adapter_params
from rackform.preflight.base import Finding, Rule, gb, group_path


class FabricUnused(Rule):
    code = "fabric-unused"

    def check(self, plan: Plan) -> Iterable[Finding]:
        fabric, w = plan.network.fabric, plan.workload
        if not plan.training or fabric not in RDMA or not plan.gpu_groups:
            return
        if plan.gpu_nodes == 1:
            yield self.finding(
                ("network", "fabric"),
                f"a single-node cluster with fabric {fabric}: NCCL stays on the node's "
                "NVLink / PCIe, so the interconnect is paid for and unused",
                "set network.fabric: ethernet (on AWS a type without EFA is cheaper), "
                "or waive with the reason",
            )
            return
        m, f = plan.sizing.memory, plan.figures.memory
        if w is None or m is None or w.method not in ("lora", "qlora"):
            return
        smallest = min(plan.usable_gb(g.gpu) for _, g in plan.gpu_groups)
        if m.replica_gb > smallest:
            return  # the frozen base has to be sharded across nodes: the fabric earns its keep
        grads = adapter_params(w, f) * f.grads_bytes_per_param.value
        yield self.finding(
            ("network", "fabric"),
            f"{w.method} fits one GPU ({gb(m.replica_gb)}), so {plan.gpu_nodes} nodes only "
            f"all-reduce {gb(grads / GB)} of adapter gradients per step: the {fabric} "
            "fabric is paid for and barely used",
            "set network.fabric: ethernet, or waive with the reason",
        )


class FabricMissing(Rule):
    code = "fabric-missing"

    def check(self, plan: Plan) -> Iterable[Finding]:
        w = plan.workload
        if not plan.training or w is None or w.method not in ("pretrain", "full"):
            return
        if plan.gpu_nodes <= 1 or plan.network.fabric in RDMA:
            return
        grads = w.model_params_b * plan.figures.memory.grads_bytes_per_param.value
        # A ring all-reduce sends and receives about twice the gradients per step.
        gbps = plan.network.gbps_per_node
        step = ""
        if gbps:
            step = f" (about {2 * grads / (gbps / 8):.1f} s per step at {gbps:g} Gb/s)"
        rdma = [f for f in plan.fabrics if f in RDMA]  # what this target offers
        fix = f"set network.fabric: {' or '.join(rdma)}"
        if "efa" in rdma:
            fix += " with an EFA instance type"
        yield self.finding(
            ("network", "fabric"),
            f"{w.method} of a {w.model_params_b:g}B model across {plan.gpu_nodes} nodes over "
            f"ethernet: every step all-reduces {gb(grads)} of bf16 gradients between nodes "
            f"over TCP{step}, and the GPUs wait on it",
            f"{fix}; or fit the job on one node (e.g. method: lora)",
        )


class TensorParallelAcrossNodes(Rule):
    """The tensor x expert parallel group exchanges activations (and the experts' all-to-all)
    every layer: it must fit one NVLink domain, a node's GPUs on HGX and 72 on an NVL72."""

    code = "tensor-parallel-across-nodes"

    def check(self, plan: Plan) -> Iterable[Finding]:
        w = plan.workload
        if w is None or not plan.gpu_groups:
            return
        group = w.tensor_parallel * w.expert_parallel
        domain = plan.topology.domain_gpus
        if group == 1 or group <= domain:
            return
        what = (
            f"tensor_parallel {w.tensor_parallel}"
            if w.expert_parallel == 1
            else f"tensor_parallel x expert_parallel = {w.tensor_parallel} x {w.expert_parallel} = {group}"
        )
        where = "a node" if plan.topology.domain_nodes == 1 else "an NVLink domain"
        yield self.finding(
            ("workload", "tensor_parallel"),
            f"{what} spans NVLink domains of {domain} GPUs ({where}): tensor parallelism "
            "exchanges activations every layer (expert parallelism its all-to-all) and needs "
            "NVLink-class bandwidth, which only exists inside a domain",
            f"keep the group <= {domain} GPUs and add pipeline or data parallelism across "
            "domains, or declare a rack-scale system (node_groups[].system) whose domain holds it",
        )


class InferenceTrainingFabric(Rule):
    code = "inference-training-fabric"

    def check(self, plan: Plan) -> Iterable[Finding]:
        fabric = plan.network.fabric
        if plan.training or fabric not in RDMA:
            return
        yield self.finding(
            ("network", "fabric"),
            f"an inference cluster with fabric {fabric}: each node serves its own replica, "
            "so the training interconnect carries nothing",
            "set network.fabric: ethernet",
        )


class InferenceTrainingGpu(Rule):
    code = "inference-training-gpu"

    def check(self, plan: Plan) -> Iterable[Finding]:
        s, catalog = plan.sizing.serving, plan.catalog
        if s is None:
            return
        # The biggest node of inference-class (no NVSwitch) GPUs the target offers.
        nodes = [
            (o.gpus * plan.usable_gb(catalog.gpus[o.gpu]), o)
            for o in plan.offers
            if not catalog.gpus[o.gpu].nvswitch
        ]
        if not nodes:
            return
        cap, o = max(nodes, key=lambda t: t[0])
        if s.total_gb > cap:
            return  # nothing smaller holds it: the NVSwitch node is the right size
        for i, g in plan.gpu_groups:
            if g.gpu.nvswitch:
                yield self.finding(
                    group_path(plan, i),
                    f"serving needs {gb(s.total_gb)} but runs on {g.gpu.key}, a training-class "
                    f"GPU with NVSwitch; {o.label} ({gb(cap)} usable) holds it",
                    f"use inference-class GPUs (e.g. {o.gpu}), or waive with the reason",
                )


class Node(NamedTuple):
    path: Path  # the field that chose the node group's GPUs
    what: str  # e.g. "8 x L40S"
    usable_gb: float  # the node's GPU memory less the reserve


def _serving_nodes(plan: Plan) -> Iterable[tuple[ServingMemory, WorkloadSpec, Node]]:
    """What one replica needs, the workload, and each GPU node group of an inference plan."""
    s, w = plan.sizing.serving, plan.workload
    if s is None or w is None:
        return
    for i, g in plan.gpu_groups:
        usable = g.gpus_per_node * plan.usable_gb(g.gpu)
        yield s, w, Node(group_path(plan, i), f"{g.gpus_per_node} x {g.gpu.key}", usable)


class InferenceNodeTooSmall(Rule):
    code = "inference-node-too-small"

    def check(self, plan: Plan) -> Iterable[Finding]:
        for s, w, node in _serving_nodes(plan):
            if s.weights_gb > node.usable_gb:
                yield self.finding(
                    node.path,
                    f"a {w.model_params_b:g}B model has {gb(s.weights_gb)} of bf16 weights but "
                    f"a node of {node.what} holds {gb(node.usable_gb)} usable",
                    "choose a node type with more GPU memory, or serve a quantized model",
                )


class InferenceKvCacheTight(Rule):
    code = "inference-kv-cache-tight"

    def check(self, plan: Plan) -> Iterable[Finding]:
        for s, w, node in _serving_nodes(plan):
            if w.serving is not None:
                continue  # a stated load: serving-memory-does-not-fit judges it, as an error
            if s.weights_gb <= node.usable_gb < s.total_gb:
                how = (
                    "estimated from the model's size with as many KV heads as attention heads"
                    if s.dims.estimated
                    else f"{s.dims.kv_heads} KV heads of {s.dims.head_size}"
                )
                yield self.finding(
                    node.path,
                    f"{gb(s.weights_gb)} of weights plus {gb(s.kv_cache_gb)} of KV cache for "
                    f"{s.load.concurrency} x {s.load.context_tokens}-token sequence(s) ({how}) "
                    f"exceed the {gb(node.usable_gb)} a node of {node.what} holds",
                    "choose a larger node type or lower seq_len; a model with grouped-query "
                    "attention needs several times less KV cache: give its shape "
                    "(workload.model: layers, hidden, attention_heads, kv_heads)",
                )


RULES: tuple[Rule, ...] = (
    FabricUnused(),
    FabricMissing(),
    TensorParallelAcrossNodes(),
    InferenceTrainingFabric(),
    InferenceTrainingGpu(),
    InferenceNodeTooSmall(),
    InferenceKvCacheTight(),
)
