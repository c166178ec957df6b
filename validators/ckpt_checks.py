"""The checkpoint phase: run the round trip on every node (see checkpoint.py) and turn the
per-node results into checks, reporting the slowest node and every node that failed."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import time
import uuid
from datetime import timedelta

import torch.distributed as dist

from validators import report
from validators.report import compare, failed, not_run


def checkpoint_checks(
    args, metrics: dict, model, opt, cpu_group, local_rank, local_world, heartbeat
) -> list[report.Check]:
    world = dist.get_world_size()
    run: list = [f"rackform-smoke-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"]
    dist.broadcast_object_list(run, src=0, group=cpu_group)
    path = os.path.join(args.checkpoint_dir, run[0])
    node_group, _groups = dist.new_subgroups(
        group_size=local_world, backend="gloo", timeout=timedelta(seconds=args.collective_timeout_s)
    )
    # Imported here: torch.distributed.checkpoint takes a second to import, which a run that
    # fails before this phase need not pay.
    from validators.checkpoint import roundtrip

    with _file_size_cap(args.fault_ckpt_fsize):
        res = roundtrip(
            model,
            opt,
            path,
            node_group,
            local_rank == 0,
            heartbeat,
            threads=args.checkpoint_threads,
            keep=args.keep_checkpoint,
        )
    # The slowest node is the one to report; every node's failure is reported.
    per_rank: list = [None] * world
    summary = (
        socket.gethostname(),
        res.error,
        res.bytes,
        res.write_gbps,
        res.read_gbps,
        res.mismatches[:5],
        res.compared,
        res.writer,
    )
    dist.all_gather_object(per_rank, summary, group=cpu_group)
    nodes = _by_host(per_rank)
    metrics["checkpoint"] = {
        h: {"error": s[1], "bytes": s[2], "write_gbps": s[3], "read_gbps": s[4], "writer": s[7]}
        for h, s in nodes.items()
    }
    return checkpoint_verdicts(per_rank, args.checkpoint_write_min)


def _slowest(values: list) -> float | None:
    return None if any(v is None for v in values) else min(values)


def _by_host(per_rank: list[tuple]) -> dict[str, tuple]:
    """One summary per host from all of its ranks: every rank compares what it loaded, so a
    mismatch or an error on any rank is the host's; the speeds are its slowest rank's, the
    entries compared its fewest, and how the files were written its slowest writer's (a summary
    without that eighth field, from an older job, has none)."""
    hosts: dict[str, list[tuple]] = {}
    for s in per_rank:
        hosts.setdefault(s[0], []).append(s)
    out = {}
    for h, rs in hosts.items():
        errors = [s[1] for s in rs if s[1]]
        mism = [m for s in rs for m in s[5]]
        slow = min(rs, key=lambda s: s[3] if s[3] is not None else -1.0)
        out[h] = (
            h,
            errors[0] if errors else None,
            max(s[2] or 0 for s in rs),
            _slowest([s[3] for s in rs]),
            _slowest([s[4] for s in rs]),
            list(dict.fromkeys(mism))[:5],
            min(s[6] for s in rs),
            slow[7] if len(slow) > 7 else "",
        )
    return out


def checkpoint_verdicts(per_rank: list[tuple], write_min: float | None) -> list[report.Check]:
    """From every rank's (host, error, bytes, write GB/s, read GB/s, first mismatches,
    entries compared, how it wrote): the round trip passes only when every rank of every node
    compared something and found it identical; the speeds are the slowest node's."""
    nodes = _by_host(per_rank)
    bad = [s for s in nodes.values() if s[1]]
    if bad:
        why = "; ".join(f"{s[0]}: {s[1]}" for s in bad)
        return [
            failed("checkpoint_roundtrip", why, measured="failed", expected="identical", op="=="),
            not_run(
                "checkpoint_write",
                "the round trip failed",
                expected=write_min,
                unit="GB/s",
            ),
            not_run("checkpoint_read", "the round trip failed", unit="GB/s"),
        ]
    mism = [(s[0], s[5]) for s in nodes.values() if s[5]]
    empty = sorted(s[0] for s in nodes.values() if not s[6])
    if mism:
        rt = failed(
            "checkpoint_roundtrip",
            "; ".join(f"{h}: {m} differ" for h, m in mism),
            measured="differs",
            expected="identical",
            op="==",
        )
    elif empty:
        rt = failed(
            "checkpoint_roundtrip",
            f"{', '.join(empty)}: nothing was compared (0 entries read back)",
            measured="nothing compared",
            expected="identical",
            op="==",
        )
    else:
        first = next(iter(nodes.values()))
        rt = compare(
            "checkpoint_roundtrip",
            "identical",
            "identical",
            "",
            "==",
            detail=f"{first[6]} entries, {first[2] / 1e6:.1f} MB per node, bit for bit",
        )
    slow_w = min(nodes.values(), key=lambda s: s[3] if s[3] is not None else -1.0)
    slow_r = min(nodes.values(), key=lambda s: s[4] if s[4] is not None else -1.0)
    where = f" (slowest node {slow_w[0]})" if len(nodes) > 1 else ""
    how = slow_w[7] or "fsync'd"
    return [
        rt,
        compare(
            "checkpoint_write",
            None if slow_w[3] is None else round(slow_w[3], 3),
            write_min,
            "GB/s",
            detail=f"torch.distributed.checkpoint, {how}{where}",
            no_threshold="no storage figure to derive a floor from",
        ),
        compare(
            "checkpoint_read",
            None if slow_r[4] is None else round(slow_r[4], 3),
            None,
            "GB/s",
            detail="page cache dropped first",
            no_threshold="no read threshold defined",
        ),
    ]


@contextlib.contextmanager
def _file_size_cap(limit: int | None):
    """Test-only: the kernel refuses writes past `limit` bytes (EFBIG; Python ignores SIGXFSZ)
    for the duration, exactly where a full disk would refuse them (ENOSPC)."""
    if limit is None:
        yield
        return
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
