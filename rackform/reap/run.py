"""One reap run: measure every cluster in one batch, decide each with the pure rules, then (with
--apply) pass every safety rule that needs the world before acting: the live tags, the
per-cluster lock, and the audit log's record of what an earlier run already began."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rackform.engine import Prepared
from rackform.reap.audit import AuditLog, Held, cluster_lock
from rackform.reap.measure import Key, measure
from rackform.reap.notify import Notifier
from rackform.reap.prometheus import Prometheus
from rackform.reap.target import Outcome, Reaper
from rackform.reap.verdict import REPORT_ONLY, Decision, decide, protected
from rackform.targets.runtimes import reaper


def usd_per_gpu_hour(p: Prepared) -> float | None:
    """The catalog's compute price of the cluster, per GPU-hour."""
    compute = p.report.cost.compute
    if not compute or not p.plan.gpus:
        return None
    return sum(line.usd_per_hour for line in compute) / p.plan.gpus


def decide_all(prepared: Sequence[Prepared], prom: Prometheus, at: float) -> list[Decision]:
    """Every cluster's measured verdict: one Prometheus query per distinct idle window."""
    windows: dict[int, list[Key]] = defaultdict(list)
    for p in prepared:
        policy = p.plan.lifecycle.idle or REPORT_ONLY
        windows[policy.for_minutes].append(_key(p))
    series = measure(prom, windows, at)
    out = []
    for p in prepared:
        d = decide(p.plan, series[_key(p)], usd_per_gpu_hour(p), p.plan.source)
        protected(d, p.plan)
        out.append(d)
    return out


def _key(p: Prepared) -> Key:
    return Key(p.plan.name, p.plan.environment, p.plan.purpose)


@dataclass
class Acting:
    """What --apply needs besides the decisions."""

    state_dir: Path
    notifier: Notifier
    reapers: Callable[[str], Reaper] = reaper
    now: Callable[[], float] = time.time

    @property
    def audit(self) -> AuditLog:
        return AuditLog(self.state_dir / "audit.jsonl")


def check_live(d: Decision, p: Prepared, reaper: Reaper, now: float) -> None:
    """The target's own word: a protect tag set outside the blueprint, nodes younger than the
    window, or live state that cannot be read (then nothing is done)."""
    live = reaper.live(p.plan)
    if live.error:
        d.hold("unknown", live.error)
    elif live.protected:
        d.hold("protected", f"live tags: {live.detail}")
    elif live.started is not None and live.started > now - d.window_min * 60:
        d.hold("young", f"nodes started {int((now - live.started) // 60)} min ago, inside the "
               f"{d.window_min}m window")  # fmt: skip


def apply_all(decisions: list[Decision], prepared: Sequence[Prepared], acting: Acting) -> None:
    run_id = uuid.uuid4().hex[:12]
    audit = acting.audit
    for d, p in zip(decisions, prepared, strict=True):
        if d.action is None:
            d.outcome = "none"
            audit.append(_entry(run_id, d, "decision"))
            continue
        try:
            with cluster_lock(acting.state_dir / "locks", d.stack):
                _act(d, p, acting, audit, run_id)
        except Held as exc:
            d.hold("locked", str(exc))
            d.outcome = "skipped"
            audit.append(_entry(run_id, d, "decision"))


def _act(d: Decision, p: Prepared, acting: Acting, audit: AuditLog, run_id: str) -> None:
    now = acting.now()
    action = d.action
    assert action is not None
    earlier = audit.acted_since(d.stack, action, now - d.window_min * 60)
    if earlier is not None:
        d.hold("acted", f"run {earlier.get('run')} already began {action} at "
               f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(earlier['ts']))}")  # fmt: skip
        d.outcome = "skipped"
        audit.append(_entry(run_id, d, "decision"))
        return
    reaper = acting.reapers(d.target)
    if action != "notify":
        check_live(d, p, reaper, now)
        if d.action is None:
            d.outcome = "skipped"
            audit.append(_entry(run_id, d, "decision"))
            return
    audit.append(_entry(run_id, d, "action", state="started"))
    notify = action == "notify"
    outcomes = [acting.notifier.send(d, now)] if notify else reaper.act(p.plan, action)
    d.results = [o.as_dict() for o in outcomes]
    d.outcome = _outcome(outcomes)
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
