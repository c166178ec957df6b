"""The smoke-training job. Run one process per GPU (or per CPU slot) with torchrun:

    torchrun --nproc-per-node 8 -m validators.smoke --report /tmp/smoke.json [options]

It checks, and reports with measured, expected and status: the GPUs (count, model), all-reduce
bus bandwidth, that a small GPT learns (loss falls, never NaN) with tokens/s and MFU, that DDP
replicas stay identical, a torch.distributed.checkpoint round trip (bit for bit, GB/s), and
the NCCL version and transport. Rank 0 writes the JSON report after every phase, so a job that
dies half-way still leaves what it measured. Exit 0 when no check failed, 1 when one did,
3 when a rank stalled (see watchdog.py).

It imports only torch and the standard library: rackform passes every expectation in.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import sys
import tempfile
import time
import uuid
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from validators import checkpoint, collectives, report
from validators.args import parse
from validators.job_checks import device_checks, node_facts
from validators.model import GPT, config, params_for_flops
from validators.report import compare, failed, not_run
from validators.train import Faults, train
from validators.watchdog import Watchdog

# Every check the job reports, in order; a report written part-way lists the rest as pending.
CHECKS = (
    "node_count",
    "gpu_count",
    "gpu_model",
    "allreduce_busbw",
    "loss_drop",
    "mfu",
    "replicas_in_sync",
    "checkpoint_roundtrip",
    "checkpoint_write",
    "checkpoint_read",
    "nccl_version",
    "nccl_transport",
)


class Job:
    """Collects checks and metrics; rank 0 rewrites the report after each phase."""

    def __init__(self, path: str | None, writer: bool, facts: dict):
        self.path, self.writer = path, writer
        self.checks: list[report.Check] = []
        self.metrics: dict = {}
        self.facts = facts
        self.t0 = time.time()

    def add(self, *checks: report.Check) -> None:
        self.checks.extend(checks)

    def flush(self, complete: bool = False) -> dict:
        done = {c.name for c in self.checks}
        self.facts["duration_s"] = round(time.time() - self.t0, 3)
        doc = report.make(
            self.checks,
            complete=complete,
            pending=[] if complete else [n for n in CHECKS if n not in done],
            job=self.facts,
            metrics=self.metrics,
        )
        if self.writer and self.path:
            tmp = f"{self.path}.tmp{os.getpid()}"
            with open(tmp, "w") as fh:
                fh.write(report.dumps(doc))
            os.replace(tmp, self.path)
        return doc


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


@record
def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    rank, world = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
    local_rank, local_world = _env_int("LOCAL_RANK", 0), _env_int("LOCAL_WORLD_SIZE", 1)
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    wd = Watchdog(args.watchdog_s, rank).start()
    run_dir = tempfile.mkdtemp(prefix=f"rackform-smoke-r{rank}-")
    nccl_log = collectives.enable_nccl_log(run_dir, rank) if use_cuda else None
    timeout = timedelta(seconds=args.collective_timeout_s)
    dist.init_process_group(
        "nccl" if use_cuda else "gloo",
        timeout=timeout,
        device_id=device if use_cuda else None,
    )
    try:
        # Object collectives and checkpoint coordination go over gloo on the CPU.
        cpu_group = dist.new_group(backend="gloo", timeout=timeout) if use_cuda else None
        job = Job(
            args.report,
            rank == 0,
            {
                "world_size": world,
                "local_world_size": local_world,
                "nodes": world // local_world,
                "backend": dist.get_backend(),
                "device": device.type,
                "torch": torch.__version__,
                "started": time.time(),
            },
        )
        phases(args, job, wd, device, cpu_group, nccl_log, local_rank, local_world)
        doc = job.flush(complete=True)
        wd.beat("shutdown")
        dist.barrier(group=cpu_group)
    finally:
        wd.stop()
        dist.destroy_process_group()
    if rank == 0 and not args.no_table:
        print(report.table(doc), flush=True)
    return 0 if doc["ok"] else 1


def phases(args, job: Job, wd: Watchdog, device, cpu_group, nccl_log, local_rank, local_world):
    world = dist.get_world_size()
    nodes = world // local_world

    wd.beat("device checks")
    facts = node_facts(device, cpu_group)
    job.facts["hosts"] = sorted({f["host"] for f in facts})
    job.add(*device_checks(args, facts, nodes))
    job.flush()

    wd.beat("all-reduce sweep")
    job.add(_allreduce(args, job, device, wd))
    job.flush()

    wd.beat("training")
    cfg = config(args.preset, **_overrides(args))
    torch.manual_seed(args.seed)  # same initial weights on every rank (DDP also broadcasts)
    model = GPT(cfg).to(device)
    n_params = params_for_flops(model)
    ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    net = torch.compile(ddp) if args.compile else ddp
    opt = torch.optim.AdamW(
        model.parameters(), lr=args.lr, weight_decay=0.0, fused=device.type == "cuda"
    )
    steps, warmup = (
        args.steps,
        args.warmup if args.warmup is not None else max(1, min(10, args.steps // 5)),
    )
    faults = Faults(args.fault_kill_rank, args.fault_stall_rank, args.fault_nan_lr, args.fault_step)
    res = train(
        net,
        opt,
        cfg,
        device,
        steps,
        warmup,
        args.seed,
        args.lr,
        faults,
        lambda s: wd.beat("training", s),
    )
    job.metrics["model"] = {**cfg.as_dict(), "params": n_params, "compiled": args.compile}
    job.add(*_training_checks(args, job, res, cfg, n_params, device, world))
    job.flush()

    wd.beat("replica comparison")
    job.add(_replicas(model, cpu_group, world))
    job.flush()

    wd.beat("checkpoint")
    job.add(*_checkpoint(args, job, model, opt, cpu_group, local_rank, local_world, wd))
    job.flush()

    wd.beat("nccl")
    job.add(*_nccl(args, device, nccl_log))


def _overrides(args) -> dict:
    return {
        k: getattr(args, k) for k in ("d_model", "layers", "heads", "seq_len", "batch", "vocab")
    }


def _allreduce(args, job: Job, device, wd: Watchdog) -> report.Check:
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
        heartbeat=lambda: wd.beat("all-reduce sweep"),
    )
    job.metrics["allreduce"] = [p.__dict__ for p in pts]
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


def _training_checks(args, job, res, cfg, n_params, device, world) -> list[report.Check]:
    out = []
    tokens_per_step = cfg.batch * cfg.seq_len * world
    if res.nan_step is not None:
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
    job.metrics["losses"] = [round(x, 5) if x == x else str(x) for x in res.losses]
    step_s = res.step_s
    tps = tokens_per_step / step_s if step_s else None
    job.metrics["training"] = {
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
    elif tps is None:
        out.append(failed("mfu", "no timed steps (the run stopped during warm-up)", unit="%"))
    elif not args.peak_tflops:
        out.append(
            not_run("mfu", "no dense BF16 peak given for this GPU (--peak-tflops)", unit="%")
        )
    else:
        mfu = 100 * 6 * n_params * tps / (world * args.peak_tflops * 1e12)
        job.metrics["training"]["mfu_pct"] = mfu
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


def _replicas(model, cpu_group, world) -> report.Check:
    """DDP keeps every replica identical; a rank whose weights drifted had a silent fault."""
    with torch.no_grad():
        sig = [repr(float(p.double().sum())) for p in model.parameters()]
    sigs: list = [None] * world
    dist.all_gather_object(sigs, sig, group=cpu_group)
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


def _checkpoint(
    args, job, model, opt, cpu_group, local_rank, local_world, wd
) -> list[report.Check]:
    world = dist.get_world_size()
    run: list = [f"rackform-smoke-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"]
    dist.broadcast_object_list(run, src=0, group=cpu_group)
    path = os.path.join(args.checkpoint_dir, run[0])
    node_group, _ = dist.new_subgroups(
        group_size=local_world, backend="gloo", timeout=timedelta(seconds=args.collective_timeout_s)
    )
    with _file_size_cap(args.fault_ckpt_fsize):
        res = checkpoint.roundtrip(
            model,
            opt,
            path,
            node_group,
            local_rank == 0,
            lambda: wd.beat("checkpoint"),
            threads=args.checkpoint_threads,
            keep=args.keep_checkpoint,
        )
    # The slowest node is the one to report; every node's failure is reported.
    per_node: list = [None] * world
    summary = (
        socket.gethostname(),
        res.error,
        res.bytes,
        res.write_gbps,
        res.read_gbps,
        res.mismatches[:5],
        res.compared,
    )
    dist.all_gather_object(per_node, summary, group=cpu_group)
    nodes = {s[0]: s for s in per_node}
    bad = [s for s in nodes.values() if s[1]]
    job.metrics["checkpoint"] = {
        h: {"error": s[1], "bytes": s[2], "write_gbps": s[3], "read_gbps": s[4]}
        for h, s in nodes.items()
    }
    if bad:
        why = "; ".join(f"{s[0]}: {s[1]}" for s in bad)
        return [
            failed("checkpoint_roundtrip", why, measured="failed", expected="identical", op="=="),
            not_run(
                "checkpoint_write",
                "the round trip failed",
                expected=args.checkpoint_write_min,
                unit="GB/s",
            ),
            not_run("checkpoint_read", "the round trip failed", unit="GB/s"),
        ]
    mism = [(s[0], s[5]) for s in nodes.values() if s[5]]
    rt = (
        failed(
            "checkpoint_roundtrip",
            "; ".join(f"{h}: {m} differ" for h, m in mism),
            measured="differs",
            expected="identical",
            op="==",
        )
        if mism
        else compare(
            "checkpoint_roundtrip",
            "identical",
            "identical",
            "",
            "==",
            detail=f"{per_node[0][6]} entries, {per_node[0][2] / 1e6:.1f} MB per node, bit for bit",
        )
    )
    slow_w = min(nodes.values(), key=lambda s: s[3])
    slow_r = min(nodes.values(), key=lambda s: s[4])
    where = f" (slowest node {slow_w[0]})" if len(nodes) > 1 else ""
    return [
        rt,
        compare(
            "checkpoint_write",
            round(slow_w[3], 3),
            args.checkpoint_write_min,
            "GB/s",
            detail=f"torch.distributed.checkpoint, fsync'd{where}",
            no_threshold="no storage figure to derive a floor from",
        ),
        compare(
            "checkpoint_read",
            round(slow_r[4], 3),
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


def _nccl(args, device, nccl_log) -> list[report.Check]:
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


if __name__ == "__main__":
    sys.exit(main())
