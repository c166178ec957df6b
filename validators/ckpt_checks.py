"""The checkpoint phase: run the round trip on every node (see checkpoint.py) and turn the
per-node results into checks, reporting the slowest node and every node that failed. With
`--object-tier`, each node also copies the checkpoint it wrote to `<url>/<hostname>` (each node
its own copy, as each node's array holds its own) while it reads it back, and the job reports
`checkpoint_tier` for every node (validators/tier_checks.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import socket
import time
import uuid

import torch.distributed as dist

from validators import report
from validators.report import compare, failed, not_run
from validators.tier import ObjectTier, TierError, directory, join
from validators.tier_checks import nodes_tier_check, unused


def checkpoint_checks(
    args, metrics: dict, model, opt, cpu_group, node_group, local_rank, heartbeat
) -> list[report.Check]:
    """`node_group`: this node's ranks over gloo (the round trip's writer and readers)."""
    world = dist.get_world_size()
    run: list = [f"rackform-smoke-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"]
    dist.broadcast_object_list(run, src=0, group=cpu_group)
    path = os.path.join(args.checkpoint_dir, run[0])
    # Imported here: torch.distributed.checkpoint takes a second to import, which a run that
    # fails before this phase need not pay.
    from validators.checkpoint import roundtrip

    copy = None
    if args.object_tier:
        copy = NodeCopy(
            args.object_tier, args.steps, args.tier_wait_s, local_rank == 0, cpu_group, heartbeat
        )
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
            copy=copy,
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
    checks = checkpoint_verdicts(per_rank, args.checkpoint_write_min)
    if copy is None:
        return checks
    # Every node's copy: each node's first rank holds its summary, the others none.
    tiers: list = [None] * world
    dist.all_gather_object(tiers, (socket.gethostname(), copy.summary()), group=cpu_group)
    per_node = {h: t for h, t in tiers if t is not None}
    metrics["checkpoint_tier"] = per_node
    read = next(i for i, c in enumerate(checks) if c.name == "checkpoint_read")
    if checks[read].measured is not None:  # the copy read the files too: said beside the figure
        detail = f"{checks[read].detail}; read while the node's copy to the tier ran"
        checks[read] = dataclasses.replace(checks[read], detail=detail)
    return [*checks, nodes_tier_check(per_node, args.tier_wait_s)]


class NodeCopy:
    """The node's copy of the round trip's checkpoint to the tier, under `<url>/<hostname>`,
    as step `step` (the training steps the checkpoint holds). The node's first rank (the one
    that makes and removes the checkpoint directory) copies it in the background, from when it
    is written, while the node reads it back; the job waits for every node's copy, up to
    `wait_s`, before the directories are removed (roundtrip's `copy`). `group` is the job's
    (every rank of every node): its waits are collectives there."""

    def __init__(self, url: str, step: int, wait_s: float, leader: bool, group, heartbeat):
        self.url, self.step, self.wait_s = join(url, socket.gethostname()), step, wait_s
        self.leader, self.group, self.heartbeat = leader, group, heartbeat
        self.tier: ObjectTier | None = None
        self._summary: dict | None = None
        if leader:
            base = directory(url)
            if base is not None:  # <url> itself, made where its parent is (the shared mount's)
                with contextlib.suppress(OSError):
                    os.mkdir(base)
            try:
                self.tier = ObjectTier(self.url, keep=1)
            except TierError as e:  # no boto3 for an s3:// tier: the copy's failure, no other
                self._summary = unused(self.url, str(e))

    def start(self, path: str) -> None:
        if self.tier is not None:
            self.tier.put(self.step, path)

    def settle(self) -> None:
        """Collective over the job, on every rank: each node's first rank waits for its copy,
        saying every second that it still does; every other rank, and a first rank whose copy
        is done, waits with it in rounds of a second, beating the watchdog, until none waits.
        No rank waits for another node's copy in one collective that could time out, however
        long the copies take (up to `wait_s`)."""

        def tick() -> None:
            _waiting(True, self.group)
            self.heartbeat()

        if self.leader and self.tier is not None:
            self._summary = self.tier.close(self.wait_s, tick=tick)
        while _waiting(False, self.group):
            self.heartbeat()

    def summary(self) -> dict | None:
        """On the first rank: what the copy did (ObjectTier.close's summary); None elsewhere."""
        if not self.leader:
            return None
        if self._summary is None and self.tier is not None:  # the round trip never settled
            self._summary = self.tier.close(0)
        return self._summary


def _waiting(me: bool, group) -> bool:
    """One round of the wait for the nodes' copies: each rank says whether it still waits for
    its node's (only a first rank can); whether any does."""
    flags: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(flags, me, group=group)
    return any(flags)


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
