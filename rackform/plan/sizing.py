"""How big a job is: model shape, GPU memory, serving memory, checkpoint size and time.

Pure arithmetic over the workload and the catalog's figures. Compile computes it once per plan
(`size`, kept as `Plan.sizing`); the rules and the cost report read that value, so a finding
and a cost line can never disagree.

Approximations (each figure comes from the catalog's `preflight.yaml` with its source):
- Shape from size: a dense decoder has about 12 x layers x hidden^2 parameters (Kaplan et al.),
  and LLaMA-family models keep hidden at about 128 x layers, so
  layers = round((params / (12 x 128^2))^(1/3)) and hidden = sqrt(params / (12 x layers)).
  That reads 7B as 33 x 4204, 13B as 40 x 5204 and 70B as 71 x 9065 (real: 32 x 4096,
  40 x 5120, 80 x 8192): close enough for memory, which depends on layers x hidden.
- Activations (Korthikanti et al., 16-bit, flash attention, so no s^2 attention term):
  34 x seq x batch x hidden bytes per layer; with full activation checkpointing each layer keeps
  only its 2 x seq x batch x hidden input, plus one layer's full activations while it is
  recomputed. Tensor parallelism (with sequence parallelism) divides them.
- Embedding and logits memory are left out; the catalog's memory reserve covers them and the
  CUDA context, NCCL buffers and fragmentation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rackform.blueprint.schema.sections import WorkloadSpec
from rackform.blueprint.schema.serving import DTYPE_BYTES, ServingLoad, lengths
from rackform.catalog import GpuModel
from rackform.catalog.preflight import MemoryFigures
from rackform.plan.arrays import ArrayPlan, slowest

GB = 1e9
FULL_STATE = ("pretrain", "full")  # methods that train (and checkpoint) every weight
ADAPTERS = ("lora", "qlora")


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int


def shape(params_b: float, f: MemoryFigures) -> Shape:
    params = params_b * GB
    k, ratio = f.params_per_layer_per_hidden_sq.value, f.hidden_per_layer.value
    layers = max(1, round((params / (k * ratio * ratio)) ** (1 / 3)))
    return Shape(layers, max(1, round(math.sqrt(params / (k * layers)))))


def usable_gb(gpu: GpuModel, f: MemoryFigures) -> float:
    """One GPU's memory less the reserve (CUDA context, NCCL buffers, fragmentation)."""
    return gpu.memory_gb.value * (1 - f.reserve_fraction.value)


def adapter_params(w: WorkloadSpec, f: MemoryFigures) -> float:
    return w.model_params_b * GB * f.lora_adapter_fraction.value if w.method in ADAPTERS else 0.0


@dataclass(frozen=True)
class TrainingMemory:
    """One replica's memory, in GB, and how it is spread over GPUs."""

    weights_gb: float  # bf16 weights (LoRA: frozen base + adapters; QLoRA: 4-bit base)
    grads_gb: float
    optimizer_gb: float
    activations_gb: float  # one GPU's micro-batch before tensor parallelism divides it
    shards: int  # GPUs that share weights, gradients and optimizer state
    tensor_parallel: int

    @property
    def states_gb(self) -> float:
        return self.weights_gb + self.grads_gb + self.optimizer_gb

    @property
    def per_gpu_gb(self) -> float:
        return self.states_gb / self.shards + self.activations_gb / self.tensor_parallel

    @property
    def replica_gb(self) -> float:
        """Everything one unsharded copy of the job holds."""
        return self.states_gb + self.activations_gb


def activations_gb(w: WorkloadSpec, f: MemoryFigures) -> float:
    s = shape(w.model_params_b, f)
    per_layer = w.seq_len * w.micro_batch * s.hidden  # tokens x hidden
    full = f.activation_bytes_per_layer.value * per_layer
    if w.activation_checkpointing:
        return (s.layers * f.checkpointed_bytes_per_layer.value * per_layer + full) / GB
    return s.layers * full / GB


def training_memory(w: WorkloadSpec, gpus: int, f: MemoryFigures) -> TrainingMemory:
    params = w.model_params_b * GB
    wb, gb, ob = (
        f.weights_bytes_per_param.value,
        f.grads_bytes_per_param.value,
        f.optimizer_bytes_per_param.value,
    )
    if w.method in FULL_STATE:
        weights, grads, opt = params * wb, params * gb, params * ob
    else:
        base = f.qlora_base_bytes_per_param.value if w.method == "qlora" else wb
        a = adapter_params(w, f)
        weights, grads, opt = params * base + a * wb, a * gb, a * ob
    shards = max(gpus, 1) if w.sharding == "fsdp" else w.tensor_parallel
    return TrainingMemory(
        weights_gb=weights / GB,
        grads_gb=grads / GB,
        optimizer_gb=opt / GB,
        activations_gb=activations_gb(w, f),
        shards=shards,
        tensor_parallel=w.tensor_parallel,
    )


@dataclass(frozen=True)
class ModelDims:
    """The served model's shape as serving reads it: the blueprint's `workload.model`, or one
    estimated from its size (`estimated`: with as many KV heads as attention heads)."""

    layers: int
    hidden: int
    attention_heads: int
    kv_heads: int
    head_size: int
    dtype_bytes: float
    estimated: bool

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V of every layer for one token: 2 x layers x KV heads x head size x bytes.
        Grouped-query attention (kv_heads < attention_heads) divides it."""
        return 2 * self.layers * self.kv_heads * self.head_size * self.dtype_bytes


@dataclass(frozen=True)
class Load:
    """What each serving node must sustain: `concurrency` requests of `prompt_tokens` in and
    `output_tokens` out at once, and the p99 objectives (None: none declared)."""

    concurrency: int
    prompt_tokens: int
    output_tokens: int
    ttft_p99_ms: float | None
    itl_p99_ms: float | None

    @property
    def context_tokens(self) -> int:
        """One sequence's tokens at its last decode step: what its KV cache holds then."""
        return self.prompt_tokens + self.output_tokens


def model_dims(w: WorkloadSpec, f: MemoryFigures) -> ModelDims:
    m = w.model
    if m is not None:
        heads = m.attention_heads
        return ModelDims(
            m.layers,
            m.hidden,
            heads,
            m.kv_heads or heads,
            m.head_size or m.hidden // heads,
            DTYPE_BYTES[m.dtype],
            estimated=False,
        )
    s = shape(w.model_params_b, f)
    head = int(f.head_size.value)
    heads = max(1, round(s.hidden / head))
    return ModelDims(
        s.layers, s.hidden, heads, heads, head, f.weights_bytes_per_param.value, estimated=True
    )


def serving_load(w: WorkloadSpec) -> Load:
    prompt, output = lengths(w.serving, w.seq_len)
    given = w.serving or ServingLoad()
    return Load(
        given.concurrency or w.micro_batch, prompt, output, given.ttft_p99_ms, given.itl_p99_ms
    )


@dataclass(frozen=True)
class ServingMemory:
    """One replica (one node's) weights and the KV cache of its whole load at full length."""

    weights_gb: float
    kv_cache_gb: float  # concurrency x (prompt + output) tokens x the model's KV bytes per token
    dims: ModelDims
    load: Load
    params: float  # the model's parameters

    @property
    def total_gb(self) -> float:
        return self.weights_gb + self.kv_cache_gb


def serving_memory(w: WorkloadSpec, f: MemoryFigures) -> ServingMemory:
    dims, load = model_dims(w, f), serving_load(w)
    params = w.model_params_b * GB
    kv = dims.kv_bytes_per_token * load.context_tokens * load.concurrency
    return ServingMemory(params * dims.dtype_bytes / GB, kv / GB, dims, load, params)


def checkpoint_gb(w: WorkloadSpec, f: MemoryFigures) -> float:
    """Weights, plus optimizer state unless the blueprint says weights-only. LoRA and QLoRA
    save their adapters only: the frozen base is never written."""
    if w.method == "serve":
        return 0.0
    params = w.model_params_b * GB if w.method in FULL_STATE else adapter_params(w, f)
    per_param = f.weights_bytes_per_param.value
    if w.checkpoint_contents == "full":
        per_param += f.optimizer_bytes_per_param.value
    return params * per_param / GB


def checkpoint_writers(w: WorkloadSpec, nodes: int) -> int:
    """Nodes writing at once: every node writes its own shard under fsdp; one rank under ddp."""
    return max(nodes, 1) if w.sharding == "fsdp" else 1


def training_flops(w: WorkloadSpec, flops_per_param_token: float) -> float | None:
    if w.tokens_b is None:
        return None
    return flops_per_param_token * w.model_params_b * GB * w.tokens_b * GB


@dataclass(frozen=True)
class CheckpointTime:
    """One synchronous checkpoint of the workload, written to the slowest node's array."""

    size_gb: float
    writers: int  # nodes writing at once
    node_gbps: float  # one node's array
    source: str  # where node_gbps came from

    @property
    def seconds(self) -> float:
        return self.size_gb / (self.node_gbps * self.writers)


@dataclass(frozen=True)
class Sizing:
    """What the plan's workload needs of its cluster: None where the blueprint gives nothing to
    size (no workload, or a fact of the other purpose)."""

    memory: TrainingMemory | None  # a training job on GPUs
    serving: ServingMemory | None  # an inference workload: one replica per node
    checkpoint_gb: float | None  # one checkpoint (None: nothing is checkpointed)
    array: ArrayPlan | None  # the slowest writing node's array; None: some speed is unknown
    checkpoint: CheckpointTime | None  # a training checkpoint at that array's speed


def size(
    w: WorkloadSpec | None,
    *,
    training: bool,
    gpus: int,
    gpu_nodes: int,
    arrays: list[ArrayPlan],
    f: MemoryFigures,
) -> Sizing:
    """`gpus` and `gpu_nodes`: the cluster's GPUs and the nodes that hold them; `arrays`: the
    arrays of the nodes that write checkpoints."""
    array = slowest(arrays)
    if w is None:
        return Sizing(None, None, None, array, None)
    if not training:
        return Sizing(None, serving_memory(w, f), None, array, None)
    memory = training_memory(w, gpus, f) if gpus else None
    size_gb = checkpoint_gb(w, f)
    time = None
    if array is not None:
        writers = checkpoint_writers(w, gpu_nodes)
        time = CheckpointTime(size_gb, writers, array.write_gbps, array.write_source)
    return Sizing(memory, None, size_gb, array, time)
