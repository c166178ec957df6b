"""What the serving smoke job is told about each serving node group: one role variable,
`rackform_serving_smoke`, a plain mapping from the node group's name (as the blueprint writes it)
to the job's arguments. A node finds its own entry by its group (the inventory's
`ng_<group>`, hyphens as underscores; a node configured at boot has the same in its artifact).

    rackform_serving_smoke:
      <node group>:
        concurrency: 32               # requests at once
        prompt_tokens: 3968           # per request
        output_tokens: 128            # per request
        ttft_p99_ms: 2000.0           # objective, or null: none declared (report, not judge)
        itl_p99_ms: 50.0              # objective, or null
        layers: 32                    # the model's shape: `workload.model`, or estimated
        hidden: 4096
        attention_heads: 32
        kv_heads: 8
        head_size: 128
        dtype_bytes: 2
        model_mount: /mnt/models      # where a model may be (storage.checkpoint.mount)
        model_path: /mnt/models/llama # workload.model.path on that mount, or null: a stand-in
        node_usd_per_hour: 10.5       # the node's share of the cluster's cost, or null
        expected_peak_memory_bytes: 21000000000  # preflight's weights + KV, the whole node
        gpu_model: L40S               # the catalog's key

Empty on a training cluster, or with no workload. Pure: read from the compiled sizing, the
decode bounds and the cost."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rackform.plan.cost import node_usd_per_hour
from rackform.plan.decode import DecodeBound
from rackform.plan.model import Basis
from rackform.plan.pricing import Cost
from rackform.plan.sizing import GB, ServingMemory

SERVING_VAR = "rackform_serving_smoke"


def serving_args(
    plan: Basis, s: ServingMemory, d: DecodeBound | None, compute_per_hour: float | None
) -> dict[str, Any]:
    """One serving node group's arguments for the serving smoke job (`d` None: a group without
    GPUs, whose job runs on the CPU: no HBM to measure against, no price per GPU)."""
    dims, load = s.dims, s.load
    price = (
        None
        if compute_per_hour is None or d is None
        else round(node_usd_per_hour(plan, compute_per_hour, d.gpus_per_node), 4)
    )
    return {
        "concurrency": load.concurrency,
        "prompt_tokens": load.prompt_tokens,
        "output_tokens": load.output_tokens,
        "ttft_p99_ms": load.ttft_p99_ms,
        "itl_p99_ms": load.itl_p99_ms,
        "layers": dims.layers,
        "hidden": dims.hidden,
        "attention_heads": dims.attention_heads,
        "kv_heads": dims.kv_heads,
        "head_size": dims.head_size,
        "dtype_bytes": int(dims.dtype_bytes),
        "model_mount": plan.checkpoint.mount,
        "model_path": model_path(plan),
        "node_usd_per_hour": price,
        "expected_peak_memory_bytes": round(s.total_gb * GB),
        "gpu_model": d.gpu if d is not None else None,
    }


def model_path(plan: Basis) -> str | None:
    """The model's directory (the mount's path joined with `workload.model.path`), or None."""
    model = plan.workload.model if plan.workload is not None else None
    if model is None or model.path is None:
        return None
    return f"{plan.checkpoint.mount.rstrip('/')}/{model.path}"


def serving_vars(
    plan: Basis, s: ServingMemory | None, decode: Iterable[DecodeBound], cost: Cost
) -> dict[str, Any]:
    """`rackform_serving_smoke` for the roles: each serving node group's job arguments (a
    group without GPUs too: its job runs on the CPU, as the testbed's and a CPU fleet's do)."""
    if s is None:
        return {SERVING_VAR: {}}
    compute = None
    if cost.compute and cost.usd_per_hour is not None:
        compute = sum(line.usd_per_hour for line in cost.compute)
    bounds = {d.group: d for d in decode}
    return {
        SERVING_VAR: {
            g.name: serving_args(plan, s, bounds.get(g.name), compute) for g in plan.node_groups
        }
    }
