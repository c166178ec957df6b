"""Checks on training: the loss fell (and never went NaN), MFU against its floor, and DDP
replicas still identical at the end."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from validators import report
from validators.report import compare, failed, not_run


def training_checks(
    args, metrics: dict, res, cfg, n_params, device, world, untimed: str | None = None
) -> list[report.Check]:
    """The loss drop and MFU of a training run. `device` is only read for its kind
    (`torch.device("cuda")` needs no GPU), so the GPU branches run in the CPU tests. `untimed`
    says why this run legitimately timed no step (a resumed job with nothing, or only warm-up,
    left to run): MFU is then not run; without it, no timed step on a GPU is a failure (the
    run stopped during warm-up)."""
    out = []
    tokens_per_step = cfg.batch * cfg.seq_len * world
    if len(res.losses) < 2:
        out.append(
            failed(
                "loss_drop",
                f"{len(res.losses)} training steps ran; a drop needs a first and a last loss",
                expected=args.loss_drop,
                unit="fraction",
                op=">=",
            )
        )
    elif res.nan_step is not None:
        out.append(
            failed(
                "loss_drop",
                f"loss became NaN/inf at step {res.nan_step}; training diverged",
                measured=float("nan"),
                expected=args.loss_drop,
                unit="fraction",
                op=">=",
            )
        )
    else:
        head = res.losses[0]
        tail = sum(res.losses[-3:]) / len(res.losses[-3:])
        drop = 1 - tail / head
        out.append(
            compare(
                "loss_drop",
                round(drop, 4),
                args.loss_drop,
                "fraction",
                detail=f"loss {head:.3f} -> {tail:.3f} over {len(res.losses)} steps",
            )
        )
    metrics["losses"] = [str(x) if math.isnan(x) else round(x, 5) for x in res.losses]
    step_s = res.step_s
    tps = tokens_per_step / step_s if step_s else None
    metrics["training"] = {
        "steps": len(res.losses),
        "timed_steps": res.timed_steps,
        "step_s": step_s,
        "tokens_per_s": tps,
        "tokens_per_step": tokens_per_step,
    }
    if device.type != "cuda":
        out.append(
            not_run("mfu", "no GPU: MFU is measured against a GPU's dense BF16 peak", unit="%")
        )
    elif not args.peak_tflops:
        out.append(
            not_run("mfu", "no dense BF16 peak given for this GPU (--peak-tflops)", unit="%")
        )
    elif tps is None and untimed:
        out.append(not_run("mfu", untimed, unit="%"))
    elif tps is None:
        out.append(failed("mfu", "no timed steps (the run stopped during warm-up)", unit="%"))
    else:
        mfu = 100 * 6 * n_params * tps / (world * args.peak_tflops * 1e12)
        metrics["training"]["mfu_pct"] = mfu
        out.append(
            compare(
                "mfu",
                round(mfu, 2),
                args.mfu_min,
                "%",
                detail=f"{tps:,.0f} tokens/s, {n_params / 1e6:.0f}M params, peak {args.peak_tflops:g} TFLOPS/GPU",
            )
        )
    return out


def replicas_check(model, cpu_group, world) -> report.Check:
    """DDP keeps every replica identical; a rank whose weights drifted had a silent fault."""
    with torch.no_grad():
        sig = [repr(float(p.double().sum())) for p in model.parameters()]
    sigs: list = [None] * world
    dist.all_gather_object(sigs, sig, group=cpu_group)
    return replicas_verdict(sigs)


def replicas_verdict(sigs: list[list[str]]) -> report.Check:
    """Every rank's per-parameter sums (as repr strings), in rank order. Identical sums pass;
    NaN or infinite ones prove nothing (every rank's NaN reads alike) and fail."""
    world = len(sigs)
    bad = sorted({r for r, sig in enumerate(sigs) for v in sig if not math.isfinite(float(v))})
    if bad:
        return failed(
            "replicas_in_sync",
            f"parameter sums are NaN or infinite on ranks {bad}: the weights cannot be compared",
            measured="not finite",
            expected=f"{world}/{world}",
            op="==",
        )
    differ = [r for r, s in enumerate(sigs) if s != sigs[0]]
    if differ:
        return failed(
            "replicas_in_sync",
            f"ranks {differ} hold different weights than rank 0",
            measured=f"{world - len(differ)}/{world}",
            expected=f"{world}/{world}",
            op="==",
        )
    return compare(
        "replicas_in_sync",
        f"{world}/{world}",
        f"{world}/{world}",
        "ranks",
        "==",
        detail="per-parameter sums identical on every rank",
    )
