"""Checks on communication: all-reduce bus bandwidth against its floor, and the NCCL version
and network transport against what the blueprint declares."""

from __future__ import annotations

import torch.distributed as dist

from validators import collectives, report
from validators.report import compare, failed, not_run


def allreduce_check(args, metrics: dict, device, heartbeat) -> report.Check:
    world = dist.get_world_size()
    if world < 2:
        return allreduce_verdict([], world, device.type == "cuda", args.busbw_min)
    lo, hi = (args.allreduce_min_mb * 2**20, args.allreduce_max_mb * 2**20)
    pts = collectives.sweep(
        collectives.sizes(int(lo), int(hi)),
        device,
        args.allreduce_iters,
        heartbeat=heartbeat,
    )
    metrics["allreduce"] = [p.__dict__ for p in pts]
    return allreduce_verdict(pts, world, device.type == "cuda", args.busbw_min)


def allreduce_verdict(
    pts: list[collectives.Point], world: int, on_gpu: bool, busbw_min: float | None
) -> report.Check:
    """The largest message's bus bandwidth (best of the repeats) against the floor."""
    name, unit = "allreduce_busbw", "GB/s"
    if world < 2:
        return not_run(name, "one rank: an all-reduce moves no data", unit=unit)
    if not pts:
        return failed(name, "the sweep measured no message size", expected=busbw_min, unit=unit)
    best = pts[-1]
    detail = f"{best.bytes / 2**20:g} MiB messages, {world} ranks, best of 3"
    if not on_gpu:
        return not_run(
            name,
            f"gloo on CPU: GPU fabric thresholds do not apply ({detail})",
            measured=round(best.busbw_gbps, 3),
            expected=busbw_min,
            unit=unit,
        )
    return compare(
        name,
        round(best.busbw_gbps, 2),
        busbw_min,
        unit,
        detail=detail,
        no_threshold="no calibrated figure for this GPU count / fabric",
    )


def nccl_checks(args, device, nccl_log) -> list[report.Check]:
    if device.type != "cuda":
        why = "gloo on CPU: no NCCL in use"
        return [not_run("nccl_version", why), not_run("nccl_transport", why)]
    tr = collectives.read_transport(nccl_log) if nccl_log else None
    return [
        nccl_version_check(collectives.nccl_version(), args.expect_nccl),
        nccl_transport_check(tr, args.expect_fabric, nccl_log),
    ]


def _version(v: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in v.split("."))
    except ValueError:
        return None


def nccl_version_check(ver: str | None, want: str | None) -> report.Check:
    """The NCCL torch loaded, against the blueprint's `software.nccl`: older fails."""
    if ver is None:
        return failed("nccl_version", "torch reports no NCCL", expected=want, op=">=")
    if want is None:
        return not_run("nccl_version", "no expected NCCL version given", measured=ver)
    have, need = _version(ver), _version(want)
    if have is None or need is None:
        return failed(
            "nccl_version",
            f"cannot compare NCCL versions {ver!r} and {want!r}",
            measured=ver,
            expected=want,
            op=">=",
        )
    return report.Check(
        "nccl_version",
        report.PASS if have >= need else report.FAIL,
        ver,
        want,
        "",
        ">=",
        "the NCCL torch loaded; older than declared fails",
    )


def nccl_transport_check(
    tr: collectives.Transport | None, fabric: str | None, nccl_log: str | None
) -> report.Check:
    """The network NCCL chose, from its own INFO log, against the fabric's."""
    if tr is None:
        return not_run("nccl_transport", f"no NCCL INFO log found at {nccl_log}")
    if fabric is None:
        return not_run("nccl_transport", "no fabric given", measured=tr.describe())
    ok = collectives.network_matches(fabric, tr.network)
    return report.Check(
        "nccl_transport",
        report.PASS if ok else report.FAIL,
        tr.network,
        collectives.FABRIC_NETWORK[fabric],
        "",
        "==",
        tr.describe(),
    )
