"""Each node measures itself alone, bounded in time: the figures a noisy neighbour or a GPU
trained down gives away, which a cluster-wide average (MFU, the all-reduce over every node)
hides. Per node:

- matmul_tflops: a square matrix multiply on each of its devices (bf16 on a GPU, float32 on a
  CPU), best of a few repeats; the node's figure is its slowest device's (one slow GPU drags
  every collective the node joins);
- h2d_gbps: pinned host memory to each GPU, best of a few, the slowest GPU's (none on a CPU);
- local_busbw_gbps: an all-reduce among the node's own ranks only, as nccl-tests' busbw
  (none with one rank on the node).

The job records them for its node (`metrics.node_perf`); rackform compares each node with the
median of its node group when it merges the nodes' reports (rackform/acceptance/outliers.py),
where the groups are known. Healthy nodes vary run to run: each figure is the best of its
repeats (DOMAIN.md). torch and the standard library only."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

# Sizes: large enough to reach a GPU's steady rate, small enough to stay in seconds; on a CPU
# (the testbed, tests) a small multiply: the figure is compared between nodes, not with a peak.
MATMUL_N = {"cuda": 8192, "cpu": 256}
COPY_BYTES = 256 << 20
ALLREDUCE_BYTES = {"cuda": 256 << 20, "cpu": 4 << 20}
REPEATS = 5


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best(run, device: torch.device, repeats: int, heartbeat) -> float:
    """The shortest of `repeats` timed runs of `run()`, after one untimed."""
    run()
    _sync(device)
    best = float("inf")
    for _rep in range(repeats):
        t0 = time.perf_counter()
        run()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
        heartbeat()
    return best


def matmul_tflops(device: torch.device, repeats: int = REPEATS, heartbeat=lambda: None) -> float:
    n = MATMUL_N[device.type]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    seconds = _best(lambda: torch.mm(a, b), device, repeats, heartbeat)
    return 2 * n**3 / seconds / 1e12


def h2d_gbps(device: torch.device, repeats: int = 3, heartbeat=lambda: None) -> float | None:
    if device.type != "cuda":
        return None
    host = torch.empty(COPY_BYTES, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    seconds = _best(lambda: dev.copy_(host, non_blocking=True), device, repeats, heartbeat)
    return COPY_BYTES / seconds / 1e9


def local_busbw_gbps(
    device: torch.device, node_group, local_world: int, repeats: int = 3, heartbeat=lambda: None
) -> float | None:
    """An all-reduce within the node (`node_group`: its ranks, on the device's backend): the
    slowest rank's time, best of the repeats, as busbw = algbw x 2(n-1)/n."""
    if local_world < 2:
        return None
    buf = torch.ones(ALLREDUCE_BYTES[device.type] // 4, dtype=torch.float32, device=device)
    best = float("inf")
    dist.all_reduce(buf, group=node_group)
    _sync(device)
    for _rep in range(repeats):
        dist.barrier(group=node_group)
        t0 = time.perf_counter()
        dist.all_reduce(buf, group=node_group)
        _sync(device)
        took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
        dist.all_reduce(took, op=dist.ReduceOp.MAX, group=node_group)
        best = min(best, float(took.item()))
        heartbeat()
    algbw = buf.numel() * 4 / best / 1e9
    return algbw * 2 * (local_world - 1) / local_world


def measure(device: torch.device, local_world: int, node_group, cpu_node_group, heartbeat) -> dict:
    """This node's figures, the same on each of its ranks (every rank measures its device; the
    node's figure is the slowest). `node_group`: the node's ranks on the device's backend;
    `cpu_node_group`: the same ranks over gloo, for the objects."""
    mine = {
        "matmul_tflops": matmul_tflops(device, heartbeat=heartbeat),
        "h2d_gbps": h2d_gbps(device, heartbeat=heartbeat),
    }
    bus = local_busbw_gbps(device, node_group, local_world, heartbeat=heartbeat)
    every: list = [None] * local_world
    dist.all_gather_object(every, mine, group=cpu_node_group)
    out: dict = {"devices": local_world, "local_busbw_gbps": None if bus is None else round(bus, 3)}
    for key in ("matmul_tflops", "h2d_gbps"):
        values = [m[key] for m in every if m and m[key] is not None]
        out[key] = round(min(values), 4) if values else None
        if values and len(values) > 1:
            out[f"{key}_per_device"] = [round(v, 4) for v in values]
    return out
