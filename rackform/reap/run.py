"""One reap run: measure every cluster in one batch, decide each with the pure rules, then pass
every safety rule that needs the world, the same way for a dry run and for --apply (so the dry
run says exactly what --apply would do): a snooze, the per-cluster lock, the audit log's record
of what an earlier run began, the target's live state (protect tags, power, launch times), the
scheduler's queue (a running or pending job keeps the cluster, whatever its GPUs say), and the
grace period: warn first, act on a later run only if the cluster stayed idle all the time since
the warning (measured again over that whole stretch)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

from rackform.blueprint.schema.sections import IdlePolicy
from rackform.lifecycle.audit import AuditLog
from rackform.lifecycle.clock import WALL, Clock
from rackform.lifecycle.directory import StateDir, state_dir
from rackform.lifecycle.lock import FileLock, Held
from rackform.lifecycle.outcome import Outcome
from rackform.plan.model import Plan
from rackform.preflight.prepared import Prepared
from rackform.reap import snooze
from rackform.reap.idleness import Window
from rackform.reap.measure import measure
from rackform.reap.notify import Notifier
from rackform.reap.snooze import iso
from rackform.reap.target import Reaper
from rackform.reap.verdict import REPORT_ONLY, Decision, decide, gpus_by_node, protected
from rackform.scheduler import queue
from rackform.scheduler.remote import RemoteError
from rackform.telemetry.labels import Key
from rackform.telemetry.prometheus import Prometheus, TelemetryError

# A warning older than this (the reaper stopped running for a while) is stale: warn again rather
# than measure an ever longer stretch.
WARNING_MAX_AGE_S = 24 * 3600
# Actions that leave the cluster's exporters down: their alerts are silenced for this long.
SILENCE_S = 7 * 24 * 3600
# Jobs named one a line in a report (the JSON's `jobs` has every one).
MAX_JOBS_NAMED = 10


def usd_per_gpu_hour(p: Prepared) -> float | None:
    """The catalog's compute price of the cluster, per GPU-hour."""
    compute = p.report.cost.compute
    if not compute or not p.plan.gpus:
        return None
    return sum(line.usd_per_hour for line in compute) / p.plan.gpus


def _key(p: Prepared) -> Key:
    return Key(p.plan.name, p.plan.environment, p.plan.purpose)


def _policy(p: Prepared) -> IdlePolicy:
    return p.plan.lifecycle.idle or REPORT_ONLY


def decide_all(
    prepared: Sequence[Prepared], prom: Prometheus, at: float, minutes: dict[str, int] | None = None
) -> list[Decision]:
    """Every cluster's measured verdict: one Prometheus query per distinct window. `minutes`
    widens a stack's window (the stretch since its warning)."""
    minutes = minutes or {}
    windows: dict[Window, list[Key]] = defaultdict(list)
    for p in prepared:
        windows[Window.of(_policy(p), minutes.get(p.plan.stack))].append(_key(p))
    series = measure(prom, windows, at)
    out = []
    for p in prepared:
        plan = p.plan
        if plan.stack in minutes and plan.lifecycle.idle is not None:
            widened = plan.lifecycle.idle.model_copy(update={"for_minutes": minutes[plan.stack]})
            plan = _with_idle(plan, widened)
        d = decide(plan, series[_key(p)], usd_per_gpu_hour(p), p.plan.source, at)
        protected(d, p.plan)
        out.append(d)
    return out


def _with_idle(plan: Plan, idle: IdlePolicy) -> Plan:
    return replace(plan, lifecycle=plan.lifecycle.model_copy(update={"idle": idle}))


def reap_lock(directory: Path | StateDir, stack: str) -> FileLock:
    """One reap run at a time on a stack: a second one (two cron jobs overlapping) finds it held
    and leaves that cluster alone."""
    path = state_dir(directory).file(f"locks/{stack}.lock")
    return FileLock(path, lambda _holder: f"another reap run holds {path}")


def _no_queue(plan: Plan) -> list[queue.Job]:
    raise RemoteError(f"no way to reach the scheduler of {plan.name} was given")


def _no_shared_lock(plan: Plan) -> AbstractContextManager[None]:
    if plan.scheduler is None:
        return nullcontext()
    raise RemoteError(f"no way to reach the controller of {plan.name} was given")


@dataclass
class World:
    """What the safety rules and the actions read and change besides Prometheus: the state
    directory, the targets' reapers, the scheduler's queue, the clock, why a stack is in
    maintenance (a rolling change or heal under way), and the stack's lock where every run
    against the cluster sees it (a cluster with Slurm: its controller's, which heal and rolling
    changes take too, so a cluster being changed or healed from another host is held as locked,
    never reaped under them; other clusters: none beyond reap's own)."""

    state_dir: Path | StateDir
    notifier: Notifier
    prom: Prometheus
    reapers: Callable[[str], Reaper]
    queue: Callable[[Plan], list[queue.Job]] = _no_queue
    now: Clock = WALL
    maintenance: Callable[[str], str | None] | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    shared_lock: Callable[[Plan], AbstractContextManager[None]] = _no_shared_lock

    def __post_init__(self) -> None:
        self.state_dir = state_dir(self.state_dir)

    @property
    def audit(self) -> AuditLog:
        return AuditLog(state_dir(self.state_dir).file("audit.jsonl"))


def run_all(
    decisions: list[Decision], prepared: Sequence[Prepared], world: World, apply: bool
) -> None:
    """Each cluster under its lock: the safety rules, then (with apply) what is due."""
    for d, p in zip(decisions, prepared, strict=True):
        try:
            with reap_lock(world.state_dir, d.stack).hold(), world.shared_lock(p.plan):
                consider(d, p, world)
                if apply:
                    execute(d, p, world)
        except Held as exc:
            d.hold("locked", str(exc))
            if apply:
                d.outcome = "skipped"
                world.audit.append(_entry(world.run_id, d, "decision"))
        except RemoteError as exc:  # the controller's lock could not be asked for
            d.hold("unknown", f"cannot take the cluster's lock on its controller: {exc}")
            d.read_failed = True
            if apply:
                d.outcome = "skipped"
                world.audit.append(_entry(world.run_id, d, "decision"))


def consider(d: Decision, p: Prepared, world: World) -> None:
    """Every rule that needs the world, in order; each may hold the cluster with its reason."""
    now = world.now()
    try:
        snoozed = snooze.active(world.state_dir, d.stack, now)
    except snooze.SnoozeError as exc:
        d.hold("unknown", str(exc))
        d.read_failed = True
        return
    if snoozed:
        d.hold("snoozed", f"snoozed until {iso(snoozed['until'])}: {snoozed.get('reason', '')}")
        return
    why = world.maintenance(d.stack) if world.maintenance else None
    if why and d.verdict in ("idle", "stalled"):
        d.hold("busy", f"in maintenance: {why}; a cluster being changed or healed is not idle")
        return
    action = d.action
    if action is None:
        scheduled(d, p, world)  # reported only, but a queued job still says busy
        return
    earlier = world.audit.acted_since(d.stack, action, now - d.window_min * 60)
    if earlier is not None:
        d.hold("acted", f"run {earlier.get('run')} already began {action} at {iso(earlier['ts'])}")
        return
    if action != "notify" and not _live(d, p, world, now):
        return
    # After the live state: a cluster already powered off is `off`, not a queue nobody answers.
    if scheduled(d, p, world):
        return
    if action == "notify":
        d.step = "act"
        return
    _grace(d, p, world, now)


def _live(d: Decision, p: Prepared, world: World, now: float) -> bool:
    """The target's live state; False where it holds the cluster."""
    reaper = world.reapers(d.target)
    live = reaper.live(p.plan, d.action)
    if live.error:
        d.hold("unknown", live.error)
        d.read_failed = True
        return False
    if live.protected:
        d.hold("protected", f"live tags: {live.detail}")
        return False
    if live.snoozed_until is not None and live.snoozed_until > now:
        d.hold("snoozed", f"snoozed on the cluster until {iso(live.snoozed_until)}: "
               f"{live.snooze_reason}")  # fmt: skip
        return False
    if live.off:
        d.hold("off", f"already off: {live.detail}")
        return False
    if live.started is not None and live.started > now - d.window_min * 60:
        d.hold("young", f"nodes started {int((now - live.started) // 60)} min ago, inside the "
               f"{d.window_min}m window")  # fmt: skip
        return False
    return True


def scheduled(d: Decision, p: Prepared, world: World) -> bool:
    """Where the blueprint declares a scheduler, its queue, read once on the controller: a
    running or pending job (or one in any state but an end state) keeps a cluster the metrics
    call idle or stalled `busy`, and withdraws a standing warning; a queue that cannot be read
    is `unknown`, never empty. True where it holds the cluster.

    Every job of the controller's queue counts, on whichever nodes: the controller is one of
    the blueprint's hosts, and reaping the cluster (power-off) takes slurmctld, and with it
    every job it schedules, down too. Jobs on nodes the blueprint does not list are named so."""
    if p.plan.scheduler is None or d.verdict not in ("idle", "stalled"):
        return False
    try:
        jobs = queue.active(world.queue(p.plan))
    except RemoteError as exc:
        d.hold("unknown", f"cannot read the Slurm queue: {exc}; an unread queue is not empty")
        d.read_failed = True
        return True
    if not jobs:
        d.reasons.append("Slurm: no job running or pending")
        return False
    listed = gpus_by_node(p.plan)
    running = sum(j.nodes != "" for j in jobs)
    why = (
        f"Slurm: {len(jobs)} jobs in the queue ({running} holding nodes, "
        f"{len(jobs) - running} waiting): a cluster with jobs is never idle, whatever its "
        f"GPUs say (measured {d.verdict})"
    )
    d.jobs = [j.as_dict() for j in jobs]
    warned = world.audit.warning(d.stack, d.action) if d.action else None
    if warned is not None:
        d.verdict, d.step = "busy", "withdraw"
        d.reasons.append(f"{why}; the warning of {iso(warned['ts'])} is withdrawn")
    else:
        d.hold("busy", why)
    d.reasons += [j.describe(listed) for j in jobs[:MAX_JOBS_NAMED]]
    if len(jobs) > MAX_JOBS_NAMED:
        d.reasons.append(f"... and {len(jobs) - MAX_JOBS_NAMED} more (the JSON names them all)")
    return True


def _grace(d: Decision, p: Prepared, world: World, now: float) -> None:
    """Warn first; act once the grace period has passed and the cluster stayed idle since."""
    idle = p.plan.lifecycle.idle
    assert idle is not None and d.action is not None
    if idle.grace_minutes == 0:
        d.step = "act"
        return
    warned = world.audit.warning(d.stack, d.action)
    if warned is None or warned["ts"] < now - WARNING_MAX_AGE_S:
        d.step = "warn"
        d.reasons.append(
            f"warn now; {d.action} after {idle.grace_minutes} min of grace if it stays idle"
        )
        return
    due = warned["ts"] + idle.grace_minutes * 60
    d.grace = {"warned": iso(warned["ts"]), "acts_after": iso(due)}
    if now < due:
        d.step = None
        d.reasons.append(
            f"warned at {iso(warned['ts'])}; {d.action} after {iso(due)} if it stays idle"
        )
        return
    # The stretch since the warning, measured whole: any activity in it withdraws the warning.
    minutes = d.window_min + int((now - warned["ts"]) // 60) + 1
    try:
        again = decide_all([p], world.prom, now, {d.stack: minutes})[0]
    except TelemetryError as exc:
        d.hold("unknown", f"cannot measure the stretch since the warning: {exc}")
        d.read_failed = True
        return
    if again.action != d.action:
        d.step = "withdraw"
        d.reasons.append(
            f"activity since the warning at {iso(warned['ts'])}: over the last {minutes} min "
            f"the cluster is {again.verdict} ({'; '.join(again.reasons[:2])}); warning withdrawn"
        )
        return
    d.step = "act"
    d.reasons.append(f"idle for all {minutes} min since {d.window_min} min before the warning")


def execute(d: Decision, p: Prepared, world: World) -> None:
    """What is due: nothing, a warning, withdrawing one, or the action (then silence the
    alerts its result would raise)."""
    audit, run_id = world.audit, world.run_id
    if d.action is None or d.step is None:
        d.outcome = "none"
        audit.append(_entry(run_id, d, "decision"))
        return
    if d.step == "withdraw":
        d.outcome = "none"
        audit.append(_entry(run_id, d, "withdrawn"))
        return
    if d.step == "warn":
        sent = world.notifier.send(d, world.now(), warning=True)
        d.results = [sent.as_dict()]
        d.outcome = "warned" if sent.ok else "failed"
        audit.append(_entry(run_id, d, "warn", state="sent" if sent.ok else "failed"))
        return
    audit.append(_entry(run_id, d, "action", state="started"))
    if d.action == "notify":
        outcomes = [world.notifier.send(d, world.now())]
    else:
        outcomes = world.reapers(d.target).act(p.plan, d.action)
    d.outcome = _outcome(outcomes)
    if d.action != "notify" and d.outcome in ("done", "partial") and world.notifier.alertmanager:
        outcomes.append(world.notifier.silence(d, world.now(), SILENCE_S))
    d.results = [o.as_dict() for o in outcomes]
    audit.append(_entry(run_id, d, "action", state=d.outcome))


def _outcome(outcomes: list[Outcome]) -> str:
    ok = sum(o.ok for o in outcomes)
    if ok == len(outcomes):
        return "done"
    return "failed" if ok == 0 else "partial"


def _entry(run_id: str, d: Decision, event: str, state: str | None = None) -> dict:
    entry = {"run": run_id, "event": event, **d.as_dict()}
    if state is not None:
        entry["state"] = state
    return entry
