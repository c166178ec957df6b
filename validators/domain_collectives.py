"""What the NVLink topology promises, measured in the smoke job: given each rank's domain
(validators/domain_layout.py), per domain an all-reduce and an all-to-all among its ranks, an
all-reduce across domains (the ranks of equal position in each, as a hierarchical all-reduce's
second stage runs), an all-to-all over the whole job (what mixture-of-experts models run), and
each link between consecutive domains' first ranks (a ring), so a slow domain or link is named
(validators/domain_checks.py judges them). Standard torch.distributed only: gloo on CPUs and
NCCL on GPUs alike, the device kind is data.

Each domain and each link is measured alone (the others wait at a barrier), so one does not
slow another's figure; a figure is the slowest member's time, best of the repeats. busbw as
nccl-tests reports it: all-reduce algbw x 2(n-1)/n, all-to-all algbw x (n-1)/n
(validators/collectives.py).

`Slowdown` is a test hook (tests/validators/test_domain_collectives.py): the ranks of one
domain, or one link's sender, sleep before each timed operation, as a slow domain would take
longer; the smoke job never passes one."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from validators.collectives import alltoall_factor, busbw_factor
from validators.domain_layout import Layout

# One large message on GPUs (a domain's steady rate), a small one on CPUs (tests, testbed).
BYTES = {"cuda": 256 << 20, "cpu": 1 << 20}
ITERS = {"cuda": 5, "cpu": 2}
REPEATS = 5


@dataclass(frozen=True)
class Slowdown:
    """TEST-ONLY: `domain`'s ranks, or the sender of the link `link` (two domains, either
    order), sleep `seconds` before each timed operation."""

    seconds: float
    domain: str | None = None
    link: tuple[str, str] | None = None


@dataclass
class Figures:
    domain_allreduce: dict[str, float | None] = field(default_factory=dict)
    domain_alltoall: dict[str, float | None] = field(default_factory=dict)
    domain_ranks: dict[str, int] = field(default_factory=dict)
    cross_allreduce: dict[str, float | None] = field(default_factory=dict)
    positions: dict[str, list[int]] = field(default_factory=dict)  # each position's ranks
    alltoall: float | None = None
    alltoall_why: str = ""  # why the job-wide all-to-all was not measured
    links: dict[str, float | None] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "alltoall_why" or v}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _slowest_best(op: Callable[[], None], group, device, iters: int, pause: float, beat) -> float:
    """Seconds per `op` among `group`'s ranks: warm-up, then `iters` per repeat, the slowest
    rank's time, best repeat."""
    op()
    _sync(device)
    best = float("inf")
    for _rep in range(REPEATS):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        for _it in range(iters):
            if pause:
                time.sleep(pause)
            op()
        _sync(device)
        took = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        took = took.to(device)
        dist.all_reduce(took, op=dist.ReduceOp.MAX, group=group)
        best = min(best, float(took.item()))
        beat()
    return best


def _allreduce(buf, group, n: int, device, iters: int, pause: float, beat) -> float:
    s = _slowest_best(lambda: dist.all_reduce(buf, group=group), group, device, iters, pause, beat)
    return buf.numel() * buf.element_size() / s / 1e9 * busbw_factor(n)


def _alltoall(buf, group, n: int, device, iters: int, pause: float, beat) -> float:
    out = torch.empty_like(buf)
    s = _slowest_best(
        lambda: dist.all_to_all_single(out, buf, group=group), group, device, iters, pause, beat
    )
    return buf.numel() * buf.element_size() / s / 1e9 * alltoall_factor(n)


def measure(
    layout: Layout,
    device: torch.device,
    cpu_group,
    timeout: timedelta,
    beat: Callable[[], None] = lambda: None,
    slow: Slowdown | None = None,
) -> Figures:
    """Every rank calls this with the same `layout`; each rank gets every figure.
    `cpu_group`: the job's ranks over gloo (None: the default group is gloo)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    nbytes, iters = BYTES[device.type], ITERS[device.type]
    # Every rank makes every group, in the same order (torch's rule for new_group).
    groups = {d: dist.new_group(list(r), timeout=timeout) for d, r in layout.domains}
    positions = layout.positions()
    pos_groups = [dist.new_group(list(p), timeout=timeout) for p in positions]
    mine = next(d for d, r in layout.domains if rank in r)
    figs = Figures(
        domain_ranks={d: len(r) for d, r in layout.domains},
        positions={f"position {k}": list(p) for k, p in enumerate(positions)},
    )
    local: dict = {"domain_allreduce": {}, "domain_alltoall": {}, "cross": {}, "links": {}}
    pause = slow.seconds if slow and slow.domain == mine else 0.0
    # Divisible by every domain's size and the world's, for all-to-all's equal splits.
    unit = math.lcm(world, *(len(r) for _name, r in layout.domains))
    numel = max(unit, nbytes // 4 - (nbytes // 4) % unit)
    buf = torch.ones(numel, dtype=torch.float32, device=device)
    for d, ranks in layout.domains:  # one domain at a time
        if rank == ranks[0] and len(ranks) < 2:
            local["domain_allreduce"][d] = local["domain_alltoall"][d] = None
        elif rank in ranks:
            n, g = len(ranks), groups[d]
            ar = _allreduce(buf, g, n, device, iters, pause, beat)
            a2a = _alltoall_or_none(buf, g, n, device, iters, pause, beat)
            if rank == ranks[0]:
                local["domain_allreduce"][d], local["domain_alltoall"][d] = ar, a2a
        dist.barrier(group=cpu_group)
    if positions:  # the position groups together, as a hierarchical all-reduce runs them
        for k, (ranks, g) in enumerate(zip(positions, pos_groups, strict=True)):
            if rank in ranks:
                gbps = _allreduce(buf, g, len(ranks), device, iters, 0.0, beat)
                if rank == ranks[0]:
                    local["cross"][f"position {k}"] = gbps
        dist.barrier(group=cpu_group)
    try:
        figs.alltoall = _alltoall(buf, None, world, device, iters, 0.0, beat)
    except (RuntimeError, NotImplementedError) as exc:
        if not _unsupported(exc):
            raise
        figs.alltoall_why = f"{dist.get_backend()} has no all-to-all here: {exc}"[:300]
    for a, b in layout.links():  # one link at a time
        src, dst = layout.leader(a), layout.leader(b)
        wait = slow.seconds if slow and slow.link and set(slow.link) == {a, b} else 0.0
        if rank in (src, dst):
            local["links"][f"{a}<->{b}"] = _round_trip(buf, src, dst, device, wait, beat)
        dist.barrier(group=cpu_group)
    every: list = [None] * world
    dist.all_gather_object(every, local, group=cpu_group)
    for part in every:
        figs.domain_allreduce.update(part["domain_allreduce"])
        figs.domain_alltoall.update(part["domain_alltoall"])
        figs.cross_allreduce.update(part["cross"])
        figs.links.update({k: v for k, v in part["links"].items() if v is not None})
    for a, b in layout.links():
        figs.links.setdefault(f"{a}<->{b}", None)
    del buf
    if device.type == "cuda":
        torch.cuda.empty_cache()  # give the buffers back before the model is built
    return figs


def _unsupported(exc: BaseException) -> bool:
    """A backend saying it has no such operation (not a timeout or a lost peer, which fail)."""
    text = str(exc).lower()
    return isinstance(exc, NotImplementedError) or "not support" in text or "unsupported" in text


def _alltoall_or_none(buf, g, n, device, iters, pause, beat) -> float | None:
    """A domain's all-to-all; None where the backend has none (its check then fails: the
    catalog's figure and the peers' are all-to-all's, and MoE models need it)."""
    try:
        return _alltoall(buf, g, n, device, iters, pause, beat)
    except (RuntimeError, NotImplementedError) as exc:
        if not _unsupported(exc):
            raise
        return None


def _round_trip(buf, src: int, dst: int, device, wait: float, beat) -> float | None:
    """`src` sends the buffer to `dst`, which sends it back; `src` times the round trip, best
    of the repeats: GB/s each way (None on `dst`, which only echoes)."""
    me = dist.get_rank()
    best = float("inf")
    for _rep in range(REPEATS + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        if me == src:
            if wait:
                time.sleep(wait)
            dist.send(buf, dst)
            dist.recv(buf, dst)
        else:
            dist.recv(buf, src)
            dist.send(buf, src)
        _sync(device)
        if _rep:
            best = min(best, time.perf_counter() - t0)
        beat()
    if me != src:
        return None
    return 2 * buf.numel() * buf.element_size() / best / 1e9
