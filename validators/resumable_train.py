"""The resumable job's training (validators/resumable.py starts it, with its signal flags
already set): the smoke job's model and training loop, checkpointed every `--checkpoint-every`
steps and when a signal asks, resumed from the newest checkpoint every node holds. With
`--object-tier` (s3://BUCKET/PREFIX, or a directory on the shared file system; default
$RACKFORM_CHECKPOINT_TIER, which the Slurm prolog can set for every job) each checkpoint is also
copied there in the background (validators/tier.py), and a node that lost its copy restores the
newest one from there. Under torchrun's elastic agent (validators/elastic.py) a node lost
mid-run costs the steps since the last checkpoint: the ranks left note where they were
(validators/failure_costs.py), the agent restarts them with the nodes left, and the job resumes
from its newest checkpoint; a node that joins again gets that checkpoint from a node holding it
(validators/peer_copy.py). The report says what each failure cost."""

from __future__ import annotations

import argparse
import math
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel as DDP

from validators import checkpoint, elastic, failure_costs, nofollow, report, slurm_env, takeback
from validators.args import add_mfu, add_training, on_gpu, resolve_training
from validators.model import GPT, params_for_flops
from validators.peer_copy import share_newest
from validators.resume import EXIT_STOPPED, Signals, Store, common_step
from validators.tier import FORMS, ObjectTier, TierError
from validators.tier import parse as tier_url
from validators.tier_checks import tier_check
from validators.train import Faults, TrainResult, train
from validators.train_checks import replicas_check, training_checks


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="validators.resumable",
        description="A training job that checkpoints every K steps and on SIGTERM / SIGUSR1,"
        " and resumes from its newest checkpoint (see validators/resumable.py).",
    )
    add_training(p)
    p.add_argument(
        "--checkpoint-dir",
        default=os.environ.get("RACKFORM_CHECKPOINT_DIR"),
        help="This job's checkpoints (default $RACKFORM_CHECKPOINT_DIR).",
    )
    p.add_argument("--checkpoint-every", type=int, default=20, help="Steps between checkpoints.")
    p.add_argument(
        "--keep",
        type=int,
        help="Checkpoints kept, on the node and on the tier (default $RACKFORM_CHECKPOINT_KEEP,"
        " else 2).",
    )
    p.add_argument("--report", help="The JSON report (default: report.json there).")
    p.add_argument("--loss-drop", type=float, default=0.2, help="Loss must fall by this fraction.")
    p.add_argument("--collective-timeout-s", type=float, default=300.0)
    p.add_argument(
        "--object-tier",
        help=f"Also copy each checkpoint to this tier in the background ({FORMS}; the newest"
        " --keep kept); a node without its local copy restores from there (default"
        " $RACKFORM_CHECKPOINT_TIER).",
    )
    p.add_argument(
        "--tier-wait-s", type=float, default=120.0, help="At the end, wait this long for copies."
    )
    p.add_argument(
        "--min-nodes",
        type=int,
        help="The fewest nodes the job may continue on after losing some (default"
        " $RACKFORM_MIN_NODES; torchrun's --nnodes MIN enforces it, the report checks it).",
    )
    p.add_argument(
        "--min-step-s",
        type=float,
        default=0.0,
        help="Each step takes at least this long (a paced job, to lose a node under it).",
    )
    add_mfu(p)
    args = p.parse_args(argv)
    resolve_training(p, args)
    env_defaults(p, args)
    if not args.checkpoint_dir:
        p.error("no checkpoint directory: pass --checkpoint-dir or set RACKFORM_CHECKPOINT_DIR")
    if args.checkpoint_every < 1:
        p.error("--checkpoint-every must be at least 1")
    args.report = args.report or os.path.join(args.checkpoint_dir, "report.json")
    args.warmup = args.warmup if args.warmup is not None else max(1, min(10, args.steps // 5))
    return args


def env_defaults(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--object-tier and --keep not given: $RACKFORM_CHECKPOINT_TIER and
    $RACKFORM_CHECKPOINT_KEEP (the Slurm prolog gives every job its tier), each checked as the
    option is, an error naming the variable."""
    tier_from = "--object-tier"
    if args.object_tier is None and os.environ.get("RACKFORM_CHECKPOINT_TIER"):
        args.object_tier = os.environ["RACKFORM_CHECKPOINT_TIER"]
        tier_from = "$RACKFORM_CHECKPOINT_TIER"
    if args.object_tier:
        try:
            tier_url(args.object_tier)
        except TierError as e:
            p.error(f"{tier_from}: {e}")
    if args.keep is None:
        keep = os.environ.get("RACKFORM_CHECKPOINT_KEEP") or "2"
        try:
            args.keep = int(keep)
        except ValueError:
            p.error(f"$RACKFORM_CHECKPOINT_KEEP={keep!r}: the checkpoints kept, a whole number")
        if args.keep < 1:
            p.error(f"$RACKFORM_CHECKPOINT_KEEP={keep!r}: keep at least 1 checkpoint")
    elif args.keep < 1:
        p.error("--keep must be at least 1")
    if args.min_nodes is None and os.environ.get("RACKFORM_MIN_NODES"):
        raw = os.environ["RACKFORM_MIN_NODES"]
        if not raw.isdigit() or int(raw) < 1:
            p.error(f"$RACKFORM_MIN_NODES={raw!r}: the fewest nodes, a whole number from 1")
        args.min_nodes = int(raw)
    if args.min_nodes is not None and args.min_nodes < 1:
        p.error("--min-nodes must be at least 1")
    if args.min_step_s < 0:
        p.error("--min-step-s must not be negative")


class Job:
    """The training state and the record of the whole training, across runs."""

    def __init__(self, args, signals: Signals, device, local_rank: int, local_world: int):
        self.args, self.signals, self.device = args, signals, device
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.leader, self.local_world = local_rank == 0, local_world
        self._asked = [0.0, 0.0, 0.0]  # what the last stop_here decided: due, signalled, stop
        timeout = timedelta(seconds=args.collective_timeout_s)
        # Object collectives over gloo; checkpoints within each node, by its own ranks.
        self.cpu = (
            dist.new_group(backend="gloo", timeout=timeout) if device.type == "cuda" else None
        )
        self.node, _groups = dist.new_subgroups(
            group_size=local_world, backend="gloo", timeout=timeout
        )
        self.store = Store(args.checkpoint_dir, args.keep)
        # The object tier, on each node's first rank: every node restores its own copy, and the
        # first node's copies go up (every node holds the same checkpoint).
        self.tier: ObjectTier | None = None
        self._tier_error: str | None = None
        if args.object_tier and self.leader:
            try:
                self.tier = ObjectTier(args.object_tier, args.keep)
            except TierError as e:
                self._tier_error = str(e)
        torch.manual_seed(args.seed)  # the same initial weights on every rank
        self.model = GPT(args.model).to(device)
        self.net = DDP(self.model, device_ids=[local_rank] if device.type == "cuda" else None)
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=args.lr, weight_decay=0.0, fused=device.type == "cuda"
        )
        self.step = 0
        # This process's timed steps and seconds, summed over its segments (one per
        # checkpoint): MFU is over the steps this process ran, never a past run's.
        self.timed = TrainResult()
        self.progress: dict = {"losses": [], "checkpoints": [], "runs": []}
        self.run: dict = {}
        self.resumed: dict = {"from_step": 0}
        # (steps done, when) at the last finished step and at the last checkpoint (or start):
        # what a lost peer costs is the work between them.
        self.done = self.mark = (0, time.time())

    def _agree(self, error: str | None) -> str | None:
        errs: list = [None] * self.world
        dist.all_gather_object(errs, error, group=self.cpu)
        return next((e for e in errs if e), None)

    def _state(self) -> dict:
        model_sd, optim_sd = get_state_dict(self.model, self.opt)
        return {"model": model_sd, "optim": optim_sd}

    def resume(self) -> None:
        """Load the newest checkpoint every node holds; the weights, optimizer state, step and
        the record of the runs before continue from there."""
        restored = self._restore()
        copied, err = share_newest(self.store, self.leader, self.cpu)
        err = self._agree(err and f"{os.uname().nodename}: {err}")
        if err:
            raise SystemExit(f"resumable: {err}")
        here: list = [None] * self.world
        dist.all_gather_object(here, self.store.steps(), group=self.cpu)
        step = common_step(here)
        if step:
            state = self._state()
            err = checkpoint.load(state, self.store.path(step), self.node)
            err = self._agree(err and f"{os.uname().nodename}: {err}")
            if err:
                raise SystemExit(f"resumable: cannot resume from {self.store.path(step)}: {err}")
            set_state_dict(
                self.model,
                self.opt,
                model_state_dict=state["model"],
                optim_state_dict=state["optim"],
            )
            self.progress = self.store.progress(step)
            for run in self.progress["runs"]:  # a run that never wrote its end was killed
                if run["ended"] == "running":
                    run["ended"] = "killed (steps after its last checkpoint were lost)"
            last = self.progress["checkpoints"][-1]
            self.resumed = {
                "from_step": step,
                "checkpoint": self.store.path(step),
                "checkpoint_time": last["time"],
                "checkpoint_why": last["why"],
                "age_s": round(time.time() - last["time"], 3),
                **({"restored_from_tier": restored} if restored else {}),
                **({"copied_from_peer": copied} if copied else {}),
            }
        self.step = step
        self._elastic_records(step)
        self.run = {
            "from_step": step,
            "to_step": step,
            "ended": "running",
            "started": time.time(),
            "slurm_restart_count": (slurm_env.facts() or {}).get("restart_count"),
            "world": self.world,
            "nodes": self.world // self.local_world,
        }
        self.progress["runs"].append(self.run)
        self.done = self.mark = (step, time.time())

    def _elastic_records(self, step: int) -> None:
        """Record the failure the nodes noted before this run (a lost peer), or the node taken
        back (the last run stopped at a checkpoint with fewer ranks than this one)."""
        notes: list = [None] * self.world
        mine = failure_costs.read(self.store.root) if self.leader else None
        dist.all_gather_object(notes, mine, group=self.cpu)
        now = time.time()
        runs = self.progress["runs"]
        lost = failure_costs.failure(
            notes, self.progress.setdefault("failures", []), step, self.world, now
        )
        if lost:
            self.progress["failures"].append(lost)
        back = failure_costs.rejoin(runs[-1], self.world, now) if runs else None
        if back:
            self.progress.setdefault("rejoins", []).append(back)
        if self.args.min_nodes and self.world // self.local_world < self.args.min_nodes:
            raise SystemExit(
                f"resumable: {self.world // self.local_world} nodes, fewer than --min-nodes"
                f" {self.args.min_nodes}"
            )

    def _restore(self) -> dict | None:
        """On each node's first rank: where the object tier holds a newer checkpoint than the
        node's directory (a node that lost its copy), download it there. Collective: a failure
        on any node ends the job on every node, saying which."""
        err, restored = self._tier_error, None
        if self.tier is not None and err is None:
            try:
                remote, local = self.tier.steps(), self.store.steps()
                if remote and remote[-1] > max(local, default=0):
                    step = remote[-1]
                    os.makedirs(self.store.root, exist_ok=True)
                    start = time.time()
                    n = self.tier.restore(step, self.store.staging(step), self.store.path(step))
                    restored = {"step": step, "from": self.tier.url, "bytes": n,
                                "seconds": round(time.time() - start, 3)}  # fmt: skip
            except Exception as exc:  # the store's and boto3's errors alike
                err = f"restoring from {self.args.object_tier}: {type(exc).__name__}: {exc}"
        err = self._agree(err and f"{os.uname().nodename}: {err}")
        if err:
            raise SystemExit(f"resumable: {err}")
        return restored

    def stop_here(self, step: int) -> bool:
        """After each step: whether to stop for a checkpoint, decided by all ranks at once
        (one is due, or a signal reached any rank)."""
        if self.args.min_step_s:
            time.sleep(max(0.0, self.args.min_step_s - (time.time() - self.done[1])))
        self.done = (step + 1, time.time())
        due = (step + 1) % self.args.checkpoint_every == 0
        flags = torch.tensor(
            [float(due), float(self.signals.save), float(self.signals.stop)], device=self.device
        )
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        self._asked = flags.tolist()
        return any(self._asked)

    def save(self, why: str, stopping: bool) -> None:
        """A checkpoint of the steps done so far, on every node; a failed one ends the job
        (training on without checkpoints would lose what resuming is for). `stopping` is what
        every rank agreed (stop_here's all-reduce), never this rank's own signal flag: a SIGTERM
        can reach one rank between that all-reduce and here, and a collective that one rank
        skips and another enters waits for the whole collective timeout (CI's stop 65)."""
        err = None
        if self.leader:
            try:
                self.store.begin(self.step)
            except OSError as exc:
                err = f"cannot create {self.store.staging(self.step)}: {exc}"
        err = self._agree(err)
        if err is None:
            err = checkpoint.save(self._state(), self.store.staging(self.step), self.node)
            err = self._agree(err and f"{os.uname().nodename}: {err}")
        if err:
            raise SystemExit(f"resumable: checkpoint after step {self.step} failed: {err}")
        self.progress["checkpoints"].append({"step": self.step, "why": why, "time": time.time()})
        self.run["to_step"] = self.step
        if self.leader:
            path = self.store.publish(self.step, self.progress)
            if self.tier is not None and self.rank == 0:
                self.tier.put(self.step, path)
        dist.barrier(group=self.cpu)
        self.mark = (self.step, time.time())
        self.done = (self.step, self.mark[1])
        if not stopping:  # stopping already (a requeue, a preemption)
            self._take_back()

    def _take_back(self) -> None:
        """Under Slurm, at a checkpoint: where the job runs on fewer nodes than it was given,
        whether taking them back pays (the nodes there, the time left worth a restart costed
        from the job's own records), and if so requeue it at full size (validators/elastic.py);
        it resumes from the checkpoint just written. The decision goes to every rank's record
        (its failure costs, `take_backs`) when it changed, and is printed then."""
        names: list = [None] * self.world
        dist.all_gather_object(names, os.environ.get("SLURMD_NODENAME"), group=self.cpu)
        said: list = [None]
        if self.rank == 0:
            restart, delay = failure_costs.restart_cost(
                self.progress, takeback.DEFAULT_RESTART_S, elastic.REQUEUE_DELAY_S
            )
            d = elastic.requeue_when_back(set(filter(None, names)), None, restart_s=restart,
                                          requeue_delay_s=delay)  # fmt: skip
            said[0] = d and d.as_dict()
        dist.broadcast_object_list(said, src=0, group=self.cpu)
        recorded = failure_costs.take_back_record(self.progress, said[0], self.step, time.time())
        if recorded and self.rank == 0:
            print(f"resumable: take back? {said[0]['why']}", flush=True)

    def train(self) -> None:
        """Train to the last step, checkpointing on the way; returns early after the
        checkpoint SIGTERM asked for, or when the loss went NaN."""
        a = self.args
        untimed = a.warmup  # only this process's first steps warm up; a checkpoint does not
        while self.step < a.steps:
            self._asked = [0.0, 0.0, 0.0]
            res = train(
                self.net, self.opt, a.model, self.device, a.steps, a.warmup, a.seed, a.lr,
                Faults(), lambda _s: None, grad_clip=a.grad_clip, start=self.step,
                stop=self.stop_here, untimed=untimed,
            )  # fmt: skip
            self.progress["losses"] += res.losses
            self.step += len(res.losses)
            untimed = max(0, untimed - len(res.losses))
            self.timed.timed_steps += res.timed_steps
            self.timed.timed_s += res.timed_s
            if res.nan_step is not None:
                self.run.update(ended="diverged", stopped=time.time())
                return
            due, signalled, stop = self._asked
            if stop or self.step >= a.steps:  # recorded before the checkpoint that keeps it
                self.run.update(ended="SIGTERM" if stop else "completed", stopped=time.time())
            if signalled:
                why = self.signals.why()
                self.signals.save = False
            else:
                why = f"every {a.checkpoint_every} steps"
            if due or signalled:
                self.save(why, stopping=bool(stop))
            if stop:
                return
        if self.run["ended"] == "running":  # resumed at the last step: nothing left to run
            self.run.update(ended="completed", stopped=time.time())

    def report(self) -> dict:
        a = self.args
        done = self.run["ended"] != "SIGTERM"
        checks: list[report.Check] = []
        metrics: dict = {}
        if done:
            ran = self.step - self.run["from_step"]
            checks += final_checks(
                a, metrics, self.progress["losses"], self.timed, ran, self.step,
                params_for_flops(self.model), self.device, self.world,
            )  # fmt: skip
            checks.append(steps_check(self.step, a.steps, self.run["ended"]))
            checks.append(replicas_check(self.model, self.cpu, self.world))
        else:
            checks.append(steps_check(self.step, a.steps, self.run["ended"]))
            metrics["losses"] = self.progress["losses"]
        checks += failure_costs.checks(self.progress, a.checkpoint_every, a.min_nodes, time.time())
        tier = None
        if self.tier is not None and self.rank == 0:
            tier = self.tier.close(a.tier_wait_s)
            checks.append(tier_check(tier, a.tier_wait_s))
        return report.make(
            checks,
            complete=done,
            job={
                "world_size": self.world,
                "nodes": self.world // self.local_world,
                "backend": dist.get_backend(),
                "device": self.device.type,
                "torch": torch.__version__,
                "slurm": slurm_env.facts(),
            },
            resume=self.resumed,
            step=self.step,
            steps=a.steps,
            runs=self.progress["runs"],
            checkpoints=self.progress["checkpoints"],
            failures=self.progress.get("failures", []),
            rejoins=self.progress.get("rejoins", []),
            take_backs=self.progress.get("take_backs", []),
            metrics=metrics,
            **({"object_tier": tier} if tier is not None else {}),
        )


def final_checks(
    args, metrics: dict, losses: list[float], timed: TrainResult, ran: int, step: int,
    n_params: int, device, world: int,
) -> list[report.Check]:  # fmt: skip
    """The loss drop over the whole training (every run's losses) and MFU over the steps this
    process ran (`timed`, summed over its segments). Pure: the device is read for its kind
    only, so the GPU's branch runs in the CPU tests. A process that ran nothing (resumed at
    the last step) or only warm-up steps has no step to time: MFU not run, with the reason."""
    res = TrainResult(losses=list(losses), timed_steps=timed.timed_steps, timed_s=timed.timed_s)
    res.nan_step = next((i for i, v in enumerate(res.losses) if math.isnan(v)), None)
    if ran == 0:
        untimed = f"nothing left to run: resumed at step {step}, the last"
    else:
        untimed = (
            f"this run's {ran} steps (from step {step - ran}) were all warm-up, which is not"
            f" timed (--warmup {args.warmup})"
        )
    return training_checks(args, metrics, res, args.model, n_params, device, world, untimed)


def steps_check(step: int, steps: int, ended: str) -> report.Check:
    """Every step ran: passes at the last step. A run stopped on SIGTERM (its checkpoint
    written, the requeued job to go on) has not finished yet: not run, never a pass."""
    if ended == "SIGTERM":
        return report.not_run(
            "steps_completed",
            f"stopped by SIGTERM after step {step} with its checkpoint written; the job resumes"
            " there (requeued, or restarted by torchrun's agent)",
            measured=step,
            expected=steps,
            unit="steps",
        )
    detail = "" if step == steps else f"the run {ended} after step {step}"
    return report.compare("steps_completed", step, steps, "steps", "==", detail=detail)


def run(signals: Signals, argv: list[str] | None = None) -> int:
    args = parse(argv)
    rank, world, local_rank, local_world = slurm_env.ranks()
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = slurm_env.rendezvous()
    use_cuda = on_gpu(args)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group(
        "nccl" if use_cuda else "gloo",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=args.collective_timeout_s),
        device_id=device if use_cuda else None,
    )
    try:
        job = Job(args, signals, device, local_rank, local_world)
        job.resume()
        print(f"resumable: rank {rank}/{world}: from step {job.step} of {args.steps}", flush=True)
        try:
            job.train()
        except Exception as exc:  # a peer lost mid-collective (gloo's or NCCL's error)
            if job.leader:
                failure_costs.note(
                    args.checkpoint_dir, *job.done, job.mark, world, time.time(),
                    f"{type(exc).__name__}: {exc}",
                )  # fmt: skip
            raise
        doc = job.report()
        if job.leader:
            nofollow.write_whole(args.report, report.dumps(doc))
    finally:
        dist.destroy_process_group()
    if rank == 0:
        print(report.table(doc), flush=True)
    if job.run["ended"] == "SIGTERM":
        wait_for_requeue(signals, rank)
        return EXIT_STOPPED
    return report.exit_code(doc)


def wait_for_requeue(signals: Signals, rank: int, poll_s: float = 5.0) -> None:
    """Preempted with a grace time, the job stays until Slurm ends the grace time (then it
    requeues the job, and signals it again: SIGCONT, SIGTERM, SIGKILL after KillWait): ended
    earlier it would count as failed and never run again. Anything else (a requeue, a
    cancellation, the time limit) has already decided the job's fate: return at once."""
    terms = signals.seen.count("SIGTERM")
    said = False
    while slurm_env.preempted_in_grace(slurm_env.record()):
        if not said and rank == 0:
            print(
                "resumable: preempted; the checkpoint is written, waiting for Slurm to requeue"
                " the job at the end of its grace time",
                flush=True,
            )
            said = True
        for _tick in range(int(poll_s * 10)):
            if signals.seen.count("SIGTERM") > terms:  # the grace time is over
                return
            time.sleep(0.1)
