"""Checks on communication: all-reduce bus bandwidth against its floor, and the NCCL version
and network transport against what the blueprint declares."""

from __future__ import annotations

import torch.distributed as dist

from validators import collectives, report
from validators.report import compare, failed, not_run


def allreduce_check(args, metrics: dict, device, heartbeat) -> report.Check:
    world = dist.get_world_size()
    name, unit = "allreduce_busbw", "GB/s"
    if world < 2:
        return not_run(name, "one rank: an all-reduce moves no data", unit=unit)
    on_gpu = device.type == "cuda"
    lo, hi = (args.allreduce_min_mb * 2**20, args.allreduce_max_mb * 2**20)
    pts = collectives.sweep(
        collectives.sizes(int(lo), int(hi)),
        device,
        args.allreduce_iters,
        heartbeat=heartbeat,
    )
    metrics["allreduce"] = [p.__dict__ for p in pts]
    best = pts[-1]
    detail = f"{best.bytes / 2**20:g} MiB messages, {world} ranks, best of 3"
    if not on_gpu:
        return not_run(
            name,
            f"gloo on CPU: GPU fabric thresholds do not apply ({detail})",
            measured=round(best.busbw_gbps, 3),
            expected=args.busbw_min,
            unit=unit,
        )
    return compare(
        name,
        round(best.busbw_gbps, 2),
        args.busbw_min,
        unit,
        detail=detail,
        no_threshold="no calibrated figure for this GPU count / fabric",
    )


def nccl_checks(args, device, nccl_log) -> list[report.Check]:
    if device.type != "cuda":
        why = "gloo on CPU: no NCCL in use"
        return [not_run("nccl_version", why), not_run("nccl_transport", why)]
    ver = collectives.nccl_version()
    want = args.expect_nccl
    if ver is None:
        vcheck = failed("nccl_version", "torch reports no NCCL", expected=want, op=">=")
    elif want is None:
        vcheck = not_run("nccl_version", "no expected NCCL version given", measured=ver)
    else:
        ok = tuple(map(int, ver.split("."))) >= tuple(map(int, want.split(".")))
        vcheck = report.Check(
            "nccl_version",
            report.PASS if ok else report.FAIL,
            ver,
            want,
            "",
            ">=",
            "the NCCL torch loaded; older than declared fails",
        )
    tr = collectives.read_transport(nccl_log) if nccl_log else None
    if tr is None:
        tcheck = not_run("nccl_transport", f"no NCCL INFO log found at {nccl_log}")
    elif args.expect_fabric is None:
        tcheck = not_run("nccl_transport", "no fabric given", measured=tr.describe())
    else:
        want_net = collectives.FABRIC_NETWORK[args.expect_fabric]
        ok = collectives.network_matches(args.expect_fabric, tr.network)
        tcheck = report.Check(
            "nccl_transport",
            report.PASS if ok else report.FAIL,
            tr.network,
            want_net,
            "",
            "==",
            tr.describe(),
        )
    return [vcheck, tcheck]
