"""All-reduce bus bandwidth over message sizes, and what NCCL says about itself (version and the
transport it chose). torch and the standard library only."""

from __future__ import annotations

import glob
import os
import re
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist


def busbw_factor(world: int) -> float:
    """All-reduce moves 2(n-1)/n of the buffer per rank (ring), so busbw = algbw x 2(n-1)/n
    is comparable across rank counts and with nccl-tests' `busbw` column."""
    return 2 * (world - 1) / world


def alltoall_factor(world: int) -> float:
    """All-to-all sends (n-1)/n of each rank's buffer to the others (the rest stays), so
    busbw = algbw x (n-1)/n, algbw being a rank's whole buffer over the time: nccl-tests'
    alltoall_perf (src/alltoall.cu, AlltoAllGetBw; read 2026-12-05,
    https://github.com/NVIDIA/nccl-tests/blob/master/src/alltoall.cu)."""
    return (world - 1) / world


def sizes(min_bytes: int, max_bytes: int, step: int = 4) -> list[int]:
    """min, min*step, ... up to and including max (max is always measured)."""
    out, s = [], min_bytes
    while s < max_bytes:
        out.append(s)
        s *= step
    return [*out, max_bytes]


@dataclass(frozen=True)
class Point:
    bytes: int
    seconds: float  # per all-reduce, the slowest rank's figure, best of the repeats
    algbw_gbps: float
    busbw_gbps: float


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def sweep(
    byte_sizes: list[int],
    device: torch.device,
    iters: int,
    repeats: int = 3,
    warmup: int = 2,
    heartbeat=lambda: None,
) -> list[Point]:
    """Time float32 all-reduces of each size like nccl-tests: a warm-up, then `iters`
    back-to-back operations per repeat; the slowest rank's time counts, best repeat kept
    (healthy nodes vary from run to run)."""
    world = dist.get_world_size()
    out = []
    for nbytes in byte_sizes:
        buf = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
        for _warm in range(warmup):
            dist.all_reduce(buf)
        _sync(device)
        best = float("inf")
        for _rep in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            for _it in range(iters):
                dist.all_reduce(buf)
            _sync(device)
            took = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
            took = took.to(device)
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            best = min(best, float(took.item()))
            heartbeat()
        algbw = buf.numel() * 4 / best / 1e9
        out.append(Point(buf.numel() * 4, best, algbw, algbw * busbw_factor(world)))
        del buf
    if device.type == "cuda":
        torch.cuda.empty_cache()  # give the largest buffer back before the model is built
    return out


def nccl_version() -> str | None:
    """The NCCL this torch process uses (its bundled or the system's), e.g. "2.21.5"."""
    if not torch.cuda.is_available():
        return None
    try:
        v = torch.cuda.nccl.version()
    except (RuntimeError, AttributeError):
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def enable_nccl_log(run_dir: str, rank: int) -> str:
    """Ask NCCL to log its transport decisions to a file of ours (not the console). Must run
    before the first NCCL communicator is created; a user's own NCCL_DEBUG_FILE is kept."""
    os.environ.setdefault("NCCL_DEBUG", "INFO")
    os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
    path = os.path.join(run_dir, f"nccl.rank{rank}.log")
    os.environ.setdefault("NCCL_DEBUG_FILE", path)
    return os.environ["NCCL_DEBUG_FILE"]


_NET = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_VIA = re.compile(r"NCCL INFO Channel \d+/\d+ : .*? via (\S+)")


@dataclass(frozen=True)
class Transport:
    network: str | None  # the net plugin NCCL chose: "IB", "Socket", "AWS Libfabric", ...
    paths: tuple[str, ...]  # how channels connect: "P2P/CUMEM", "NET/IB/0/GDRDMA", "SHM/..."

    def describe(self) -> str:
        paths = ", ".join(self.paths) or "no channel lines"
        return f"network {self.network or 'unknown'}; channels via {paths}"


def read_transport(log_path: str) -> Transport | None:
    """Parse NCCL's INFO log (one file per process; `%h`/`%p` in the name are globbed)."""
    files = glob.glob(re.sub(r"%[hp]", "*", log_path))
    if not files:
        return None
    network, paths = None, []
    for f in files:
        with open(f, errors="replace") as fh:
            for line in fh:
                if m := _NET.search(line):
                    network = network or m.group(1)
                elif (m := _VIA.search(line)) and m.group(1) not in paths:
                    paths.append(m.group(1))
    if network is None and not paths:
        return None
    return Transport(network, tuple(paths))


# What NCCL calls the network each fabric should give: EFA goes through the aws-ofi-nccl
# plugin ("AWS Libfabric", newer releases "Libfabric"), InfiniBand and RoCE through NCCL's
# IB verbs transport, plain Ethernet through sockets.
FABRIC_NETWORK = {"efa": "Libfabric", "infiniband": "IB", "roce": "IB", "ethernet": "Socket"}


def network_matches(fabric: str, network: str | None) -> bool:
    want = FABRIC_NETWORK.get(fabric)
    return want is not None and network is not None and want in network.split()
