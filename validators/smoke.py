"""The smoke-training job. Run one process per GPU (or per CPU slot) with torchrun:

    torchrun --nproc-per-node 8 -m validators.smoke --report /tmp/smoke.json [options]

It checks, and reports with measured, expected and status: the GPUs (count, model), all-reduce
bus bandwidth, that a small GPT learns (loss falls, never NaN) with tokens/s and MFU, that DDP
replicas stay identical, a torch.distributed.checkpoint round trip (bit for bit, GB/s), and
the NCCL version and transport; with `--object-tier`, each node's copy of that checkpoint to
the tier (object storage or a directory on the shared file system). The first rank of every
node rewrites the JSON report after every phase, so a job that dies half-way still leaves what
it measured. Only after every rank has come through the last phase (a collective all of them
must join) does it write the end marker, `ended`, and `complete: true`: the evidence that the
job ran to the end. Before the cluster-wide phases each node measures itself alone (matmul, host
to device copies, an all-reduce within the node: `metrics.node_perf`), which rackform compares
between the nodes of a group when it merges their reports. Handed the plan's NVLink domains
(`--nvlink-domain`), it then measures all-reduce and all-to-all within each domain, across them
and over the job, and each link between domains (validators/domain_phase.py).

Exit 0 when no check failed, 1 when one did (rank 0 carries the verdict), 2 when numpy is
missing (checked before anything starts), 3 when a rank stalled (see watchdog.py). Under
validators.launch (`--verdict-in-report`) every rank that reached the end exits 0: torchrun
treats a rank's exit 1 as a crash and stops the others, so a failed check must not look like one.

It imports only torch and the standard library (and boto3, only for an s3:// tier): rackform
passes every expectation in.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from validators import collectives, domain_phase, node_perf, nofollow, report
from validators.args import parse
from validators.ckpt_checks import checkpoint_checks
from validators.comm_checks import allreduce_check, nccl_checks
from validators.deps import numpy_problem
from validators.device_checks import device_checks, node_facts
from validators.heartbeat import Heartbeat
from validators.model import GPT, params_for_flops
from validators.train import Faults, train
from validators.train_checks import replicas_check, training_checks
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
# With --object-tier, after the round trip's checks: every node's copy to the tier.
TIER_CHECKS = ("checkpoint_tier",)
EXIT_SETUP = 2  # something the job needs is missing; nothing ran


class Job:
    """Collects checks and metrics; the writer rewrites the report after each phase."""

    def __init__(
        self, path: str | None, writer: bool, facts: dict, expected: tuple[str, ...] = CHECKS
    ):
        self.path, self.writer, self.expected = path, writer, expected
        self.checks: list[report.Check] = []
        self.metrics: dict = {}
        self.facts = facts
        self.t0 = time.monotonic()
        self.phases_s: dict[str, float] = {}
        self._phase: tuple[str, int] | None = None

    def _ms(self) -> int:
        """Milliseconds since the job started: phases and the job's duration are cut from
        one clock on one grid, so the phases never add up to more than the duration."""
        return round((time.monotonic() - self.t0) * 1000)

    def phase(self, name: str | None) -> None:
        """Close the running phase's timer (its seconds go into metrics.phases_s) and start
        `name`'s, or none."""
        now = self._ms()
        if self._phase is not None:
            self.phases_s[self._phase[0]] = (now - self._phase[1]) / 1000
        self._phase = (name, now) if name else None

    def add(self, *checks: report.Check) -> None:
        self.checks.extend(checks)

    def flush(self, ended: dict | None = None) -> dict:
        """Write the report. `ended` is the end marker: given only once every rank has come
        through the last phase; the report is `complete` with it and never without."""
        done = {c.name for c in self.checks}
        if ended is not None:
            self.phase(None)  # a finished job has no phase still running
        self.facts["duration_s"] = self._ms() / 1000
        if self.phases_s:
            self.metrics["phases_s"] = dict(self.phases_s)
        extra = {"ended": ended} if ended is not None else {}
        doc = report.make(
            self.checks,
            complete=ended is not None,
            pending=[n for n in self.expected if n not in done],
            **extra,
            job=self.facts,
            metrics=self.metrics,
        )
        if self.writer and self.path:
            # Whole, and through no link a user placed beside it (the report may go to /tmp).
            nofollow.write_whole(self.path, report.dumps(doc))
        return doc


def expected_checks(args) -> tuple[str, ...]:
    """The checks this run reports, in order: CHECKS, with --nvlink-domain the domains' after
    the all-reduce sweep, and with --object-tier the tier's after the round trip's."""
    out = CHECKS
    if args.nvlink_domain:
        at = out.index("allreduce_busbw") + 1
        out = out[:at] + domain_phase.CHECKS + out[at:]
    if args.object_tier:
        at = out.index("checkpoint_read") + 1
        out = out[:at] + TIER_CHECKS + out[at:]
    return out


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


@record
def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    rank, world = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
    local_rank, local_world = _env_int("LOCAL_RANK", 0), _env_int("LOCAL_WORLD_SIZE", 1)
    missing = numpy_problem()
    if missing:  # before the process group: no rank waits on one that left
        if local_rank == 0:
            print(f"smoke: {missing}", file=sys.stderr, flush=True)
        return EXIT_SETUP
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        if local_rank >= torch.cuda.device_count():
            raise SystemExit(
                f"smoke: local rank {local_rank} has no GPU: only {torch.cuda.device_count()} "
                "visible; start no more processes per node than GPUs (--nproc)"
            )
        torch.cuda.set_device(local_rank)
        # Whatever stays in fp32 under bf16 autocast may use TF32 tensor cores.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    exported = Heartbeat(args.heartbeat_file if local_rank == 0 else None)
    wd = Watchdog(args.watchdog_s, rank, exported).start()
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
        # Every rank holds the same checks, so each node's first rank writes the whole report
        # there: a multi-node launch finds it on every node.
        job = Job(
            args.report,
            local_rank == 0,
            {
                "world_size": world,
                "local_world_size": local_world,
                "nodes": world // local_world,
                "backend": dist.get_backend(),
                "device": device.type,
                "torch": torch.__version__,
                "started": time.time(),
            },
            expected_checks(args),
        )
        phases(args, job, wd, device, cpu_group, nccl_log, local_rank, local_world)
        if args.fault_kill_at_end == rank:
            print(
                f"smoke: rank {rank}: test fault: killing myself after the last phase", flush=True
            )
            os.kill(os.getpid(), signal.SIGKILL)
        doc = job.flush(ended=end_marker(wd, cpu_group, world))
    finally:
        wd.stop()
        dist.destroy_process_group()
        shutil.rmtree(run_dir, ignore_errors=True)
    if rank == 0 and not args.no_table:
        print(report.table(doc), flush=True)
    if args.verdict_in_report:
        return 0  # this rank reached the end; the report says what the checks found
    # Rank 0 carries the verdict; the other ranks finished their part.
    return 0 if doc["ok"] or rank != 0 else 1


def end_marker(wd: Watchdog, cpu_group, world: int) -> dict:
    """Every rank says it came through the last phase: a collective that completes only when
    all of them join, so the marker written after it is evidence that the whole job ran to the
    end (rank 0 finishing alone proves nothing about the others)."""
    wd.beat("end of job")
    here: list = [None] * world
    dist.all_gather_object(here, (dist.get_rank(), socket.gethostname()), group=cpu_group)
    came = [x for x in here if x is not None]
    return {
        "ranks": len({r for r, _host in came}),
        "world_size": world,
        "hosts": sorted({h for _rank, h in came}),
        "time": time.time(),
    }


def _beat(wd: Watchdog, phase: str):
    """A heartbeat for a phase's long measurements: the watchdog hears the phase is alive."""

    def beat() -> None:
        wd.beat(phase)

    return beat


def _begin(job: Job, wd: Watchdog, phase: str) -> None:
    """A new phase: the watchdog names it if the rank stalls, the report times it."""
    wd.beat(phase)
    job.phase(phase)


def self_measure(args, device, local_world: int, cpu_node_group, wd: Watchdog) -> dict:
    """This node alone (validators/node_perf.py): its devices' matrix multiply, host to device
    copies and an all-reduce among its own ranks; rackform compares nodes when it merges.
    `cpu_node_group`: the node's ranks over gloo, for the objects."""
    timeout = timedelta(seconds=args.collective_timeout_s)
    # Every rank makes every node's group (new_subgroups' rule), on the device's backend.
    node_group, _every = dist.new_subgroups(group_size=local_world, timeout=timeout)
    return node_perf.measure(
        device, local_world, node_group, cpu_node_group, lambda: wd.beat("node self-measure")
    )


def phases(args, job: Job, wd: Watchdog, device, cpu_group, nccl_log, local_rank, local_world):
    world = dist.get_world_size()
    nodes = world // local_world
    # Each node's ranks over gloo, made once by every rank (new_subgroups' rule): the
    # self-measure's objects and the checkpoint round trip's coordination.
    cpu_node_group, _every = dist.new_subgroups(
        group_size=local_world, backend="gloo", timeout=timedelta(seconds=args.collective_timeout_s)
    )

    _begin(job, wd, "device checks")
    facts = node_facts(device, cpu_group)
    job.facts["hosts"] = sorted({f["host"] for f in facts})
    job.add(*device_checks(args, facts, nodes))
    job.flush()

    _begin(job, wd, "node self-measure")
    job.metrics["node_perf"] = self_measure(args, device, local_world, cpu_node_group, wd)
    job.flush()

    _begin(job, wd, "all-reduce sweep")
    job.add(allreduce_check(args, job.metrics, device, lambda: wd.beat("all-reduce sweep")))
    job.flush()

    if args.nvlink_domain:  # the plan's NVLink domains (validators/domain_phase.py)
        _begin(job, wd, "nvlink domains")
        job.add(
            *domain_phase.run(args, device, cpu_group, job.metrics, _beat(wd, "nvlink domains"))
        )
        job.flush()

    _begin(job, wd, "training")
    cfg = args.model
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
        grad_clip=args.grad_clip,
    )
    job.metrics["model"] = {**cfg.as_dict(), "params": n_params, "compiled": args.compile}
    job.add(*training_checks(args, job.metrics, res, cfg, n_params, device, world))
    job.flush()

    _begin(job, wd, "replica comparison")
    job.add(replicas_check(model, cpu_group, world))
    job.flush()

    _begin(job, wd, "checkpoint")
    job.add(
        *checkpoint_checks(
            args,
            job.metrics,
            model,
            opt,
            cpu_group,
            cpu_node_group,
            local_rank,
            lambda: wd.beat("checkpoint"),
        )
    )
    job.flush()

    _begin(job, wd, "nccl")
    job.add(*nccl_checks(args, device, nccl_log))
    job.flush()


if __name__ == "__main__":
    sys.exit(main())
