"""Every preflight finding's code, level and one-line summary, as data.

The rules (`rackform.preflight.*`) name their code and take level and summary from here, and
the blueprint schema checks waivers against these codes, so the schema never imports a rule.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Level = Literal["error", "warning"]


class Code(NamedTuple):
    level: Level
    summary: str


CODES: dict[str, Code] = {
    "memory-does-not-fit": Code(
        "error", "the training job needs more memory per GPU than the GPUs have"
    ),
    "memory-oversized": Code(
        "warning", "a fine-tune whose whole replica uses a small share of one GPU's memory"
    ),
    "nodes-unused": Code(
        "warning", "more GPUs than global_batch / micro_batch data-parallel ranks can use"
    ),
    "fabric-unused": Code(
        "warning", "an RDMA fabric for a single-node job or for LoRA / QLoRA data parallelism"
    ),
    "fabric-missing": Code(
        "error", "multi-node pre-training or full fine-tuning without an RDMA fabric"
    ),
    "tensor-parallel-across-nodes": Code(
        "error", "tensor_parallel x expert_parallel larger than one NVLink domain's GPUs"
    ),
    "job-not-domain-multiple": Code(
        "warning", "a job larger than one NVLink domain but not a multiple of it"
    ),
    "allreduce-across-domains-slow": Code(
        "warning", "the gradients' ring all-reduce across NVLink domains outlasts a step's compute"
    ),
    "inference-training-fabric": Code(
        "warning", "an inference cluster with an RDMA training fabric"
    ),
    "inference-training-gpu": Code(
        "warning", "NVSwitch training-class GPUs serving a model a cheaper node holds"
    ),
    "inference-node-too-small": Code(
        "error", "an inference node whose GPUs cannot hold the model's weights"
    ),
    "inference-kv-cache-tight": Code(
        "warning", "an inference node that holds the weights but not a full-length KV cache"
    ),
    "serving-memory-does-not-fit": Code(
        "error", "a serving node that cannot hold the weights plus its stated load's KV cache"
    ),
    "serving-itl-unreachable": Code(
        "error", "a p99 inter-token latency objective below one decode step's HBM-bandwidth bound"
    ),
    "serving-ttft-unreachable": Code(
        "error", "a p99 time-to-first-token objective below the prefill's compute bound"
    ),
    "checkpoint-overhead": Code(
        "error", "checkpoint time / checkpoint interval above 2% of training time"
    ),
    "checkpoint-interval": Code(
        "warning",
        "the declared checkpoint interval's expected goodput more than a point below the best",
    ),
    "checkpoint-slow": Code("warning", "one checkpoint takes longer than 10 s"),
    "checkpoint-throughput-unknown": Code(
        "warning", "checkpoint time cannot be checked: no write speed in the blueprint or catalog"
    ),
    "checkpoint-capacity": Code("error", "the checkpoints kept do not fit a node's array"),
    "checkpoint-raid-drives": Code("error", "too few drives for the checkpoint array's RAID level"),
    "shared-read-slow": Code(
        "warning", "the data loader needs more than half of the shared tier's read throughput"
    ),
    "shared-checkpoint-slow": Code(
        "warning", "a checkpoint through the shared tier takes longer than 10 s"
    ),
    "shared-throughput-unknown": Code(
        "warning", "the shared server's throughput is not declared, so it was not checked"
    ),
    "rack-power-headroom": Code(
        "warning", "a colocation rack's estimated server draw near or over its power budget"
    ),
    "utilization-gap": Code(
        "warning", "expected GPU utilization below the 85% target, with what the gap costs"
    ),
    "aws-default-quota": Code("warning", "a region's stacks over the default VPC/EIP/NAT quota"),
    "aws-reservation-unusable": Code(
        "error", "a node group's capacity reservation or block is unknown, over, or of another type"
    ),
    "aws-reservation-short": Code(
        "error", "a capacity reservation or block holds fewer instances than its groups' nodes"
    ),
    "aws-reservation-zone": Code(
        "error", "a capacity reservation or block in another zone than the cluster's subnet"
    ),
    "aws-capacity-block-ends": Code(
        "warning", "a capacity block whose instances are terminated before the run would end"
    ),
    "utilization-ownership": Code(
        "warning", "owned hardware expected to run below break-even, or on-demand cloud run busy"
    ),
}
