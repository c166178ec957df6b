"""The timed training loop of the smoke job: DDP over the synthetic stream, losses kept on the
device (one sync every few steps, for the NaN check), step time from the steps after warm-up.
The test-only faults (kill or stall a rank, a NaN learning rate) act here."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from validators.model import GPTConfig, synthetic_batch


@dataclass(frozen=True)
class Faults:
    """Test-only fault injection; every field off by default."""

    kill_rank: int | None = None  # this rank SIGKILLs itself at `step`
    stall_rank: int | None = None  # this rank stops making progress at `step`
    nan_lr: bool = False  # the learning rate becomes NaN at `step` (on every rank)
    step: int = 2


@dataclass
class TrainResult:
    losses: list[float] = field(default_factory=list)  # mean over ranks, one per step run
    nan_step: int | None = None  # first step whose loss was not finite
    timed_steps: int = 0
    timed_s: float = 0.0

    @property
    def step_s(self) -> float | None:
        return self.timed_s / self.timed_steps if self.timed_steps else None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _inject(f: Faults, step: int, rank: int, opt: torch.optim.Optimizer) -> None:
    if step != f.step:
        return
    if f.kill_rank == rank:
        print(f"smoke: rank {rank}: test fault: killing myself at step {step}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if f.stall_rank == rank:
        print(f"smoke: rank {rank}: test fault: stalling at step {step}", flush=True)
        while True:
            time.sleep(3600)
    if f.nan_lr:
        for g in opt.param_groups:
            g["lr"] = float("nan")


def train(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    cfg: GPTConfig,
    device: torch.device,
    steps: int,
    warmup: int,
    seed: int,
    lr: float,
    faults: Faults,
    heartbeat,
    check_every: int = 10,
    grad_clip: float = 0.0,
    start: int = 0,
    stop=None,
    untimed: int | None = None,
) -> TrainResult:
    """Run steps `start` to `steps - 1` (fewer if the loss goes NaN). The first `warmup` steps
    run are not timed (allocator, autotuning, compilation; `untimed` steps instead where given:
    a run continued after a checkpoint is warm already). The learning rate ramps up over
    steps 0 to `warmup`, and the gradient norm is clipped to `grad_clip` when it is above 0.
    `stop(step)`, called on every rank after each step, ends the run after that step when it
    returns true; every rank must answer alike (it decides collectively). A run resumed at
    `start` sees the batches and learning rates an uninterrupted one would have."""
    rank = dist.get_rank()
    amp = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if device.type == "cuda"
        else contextlib.nullcontext()
    )
    res = TrainResult()
    losses: list[torch.Tensor] = []
    t0 = None
    untimed = warmup if untimed is None else untimed
    for step in range(start, steps):
        if step == start + untimed:
            _sync(device)
            t0 = time.perf_counter()
        for g in opt.param_groups:
            if not math.isnan(g["lr"]):
                g["lr"] = lr * min(1.0, (step + 1) / max(1, warmup))
        _inject(faults, step, rank, opt)
        x, y = synthetic_batch(cfg, step, rank, seed, device)
        with amp:
            loss = model(x, y)
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        heartbeat(step)
        if (step + 1) % check_every == 0 or step + 1 == steps:
            # One flag for all ranks, so every rank stops at the same step.
            bad = torch.tensor([0.0 if torch.isfinite(loss).item() else 1.0], device=device)
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
            if bad.item():
                break
        if stop is not None and stop(step):
            break
    _sync(device)
    if not losses:  # nothing left to run (resumed at or past the last step)
        return res
    if t0 is not None:
        res.timed_steps = len(losses) - untimed
        res.timed_s = time.perf_counter() - t0
    per_step = torch.stack(losses).float()
    dist.all_reduce(per_step)  # SUM; gloo has no AVG
    per_step /= dist.get_world_size()
    res.losses = per_step.tolist()
    res.nan_step = next((i for i, v in enumerate(res.losses) if not math.isfinite(v)), None)
    return res
