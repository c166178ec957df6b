"""`rackform heal --apply` for one cluster: the nodes the verdict says heal acts on now go through
the core a rolling change uses (rackform/rollout/roll.py), each a batch of one: within the
out-of-service budget (read live from Slurm), drained, its jobs requeued (or waited for),
remediated (rackform/health/remedy.py), re-validated alone and returned to service only on a
passing report. A node whose action is `drain`, or whose remediation already failed twice in
the policy's window, is drained and named for a person (the audit log's `ticket`). A node that
fails its re-validation stays drained with the reason; heal does not retry it on its own.

The record (`<stack>.heal.json`), lock and audit log are the stack's in the rollout state
directory: a heal run and a rolling change never take nodes out at once, and a run killed
mid-remediation is finished by the next run before it judges anew."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from rackform.blueprint.schema.health import HealthPolicy
from rackform.blueprint.schema.rollout import RolloutPolicy
from rackform.health.verdict import NodeHealth
from rackform.reap.audit_view import Fold, view
from rackform.reap.target import ActionError
from rackform.rollout.record import DONE, FAILED, Record, Store
from rackform.rollout.roll import REQUEUE_WAIT_S, Nodes, Roll, Scheduler, empty, new_record

GIVE_UP_AFTER = 2  # failed remediations of one node in the window: then a person's


def _policy(h: HealthPolicy) -> RolloutPolicy:
    return RolloutPolicy(
        canary=False,
        jobs=h.jobs,
        wait_minutes=h.wait_minutes,
        validate_minutes=h.validate_minutes,
        pause_on_failure=False,
    )


KEPT = 2 * GIVE_UP_AFTER  # the latest failures kept per node: enough for any window


def _failed(state: dict, e: dict) -> None:
    """Per node, when heal's remediation of it last failed (the latest KEPT)."""
    if (e.get("event"), e.get("kind"), e.get("status")) != ("batch", "heal", FAILED):
        return
    ts = e.get("ts")
    for node in e.get("nodes") or []:
        if isinstance(node, str) and isinstance(ts, int | float):
            state[node] = [*state.get(node, []), ts][-KEPT:]


FAILED_AT = Fold("heal-failures", dict, _failed)


def failures(store: Store, since: float) -> Counter[str]:
    """How often heal's remediation of each node failed since `since` (up to KEPT: more than
    GIVE_UP_AFTER is all the decision asks), from the audit log's incremental view."""
    return Counter(
        {
            n: c
            for n, ts in view(store.log.path, FAILED_AT).items()
            if (c := sum(t >= since for t in ts))
        }
    )


@dataclass
class Outcome:
    node: str
    action: str
    status: str  # done | failed | drained (a person's) | replaced | waits
    why: str = ""

    def as_json(self) -> dict:
        return {"node": self.node, "action": self.action, "status": self.status, "why": self.why}


def _out(slurm: Scheduler, node: str, reason: str) -> str:
    """Drain `node` with `reason` and requeue its jobs; why the drain failed, or ""."""
    bad = [o for o in slurm.drain([node], reason[:200]) if not o.ok]
    slurm.requeue([node])
    return bad[0].detail if bad else ""


def _replace(
    n: NodeHealth, slurm: Scheduler | None, policy: HealthPolicy, store: Store, replace
) -> Outcome:
    """Drained, its jobs requeued (or waited for) as the policy says, so they resume from their
    checkpoints elsewhere, and only then, with no job left on it, given up for a new machine.
    It stays drained under its name: its successor comes back through `up` (or its group)
    configured and validated, and a person returns it to service. Without a scheduler (a
    serving group) there is nothing to drain: the node is given up at once."""
    why = "; ".join(e.detail for e in n.evidence) or n.action
    if slurm is not None:
        reason = f"rackform heal: replaced ({why})"[:200]
        bad = [o for o in slurm.drain([n.node], reason) if not o.ok]
        if bad:
            return Outcome(n.node, n.action, "failed", f"draining: {bad[0].detail}")
        left = empty(slurm, [n.node], _policy(policy), REQUEUE_WAIT_S)
        if left:
            return Outcome(
                n.node, n.action, "failed", "drained; jobs still running: " + "; ".join(left)
            )
    try:
        if replace is None:
            raise ActionError("this target does not replace nodes")
        done = replace(n.node)
    except ActionError as exc:
        store.audit("replace", kind="heal", node=n.node, ok=False, why=str(exc))
        return Outcome(n.node, n.action, "failed", f"drained; not replaced: {exc}")
    store.audit("replace", kind="heal", node=n.node, ok=True, why=done)
    return Outcome(n.node, n.action, "replaced", done)


def replace_unscheduled(
    nodes: list[NodeHealth], policy: HealthPolicy, store: Store, replace: Callable[[str], str]
) -> list[Outcome]:
    """A cluster without a scheduler (an AWS serving group): the nodes judged to act whose
    action is `replace`, given up within the budget the verdict kept to; the others need a
    drain heal can only ask of Slurm, and are left."""
    return [
        _replace(n, None, policy, store, replace) for n in nodes if n.acts and n.action == "replace"
    ]


def unfinished(rec: Record | None) -> bool:
    return rec is not None and any(b.status not in (DONE, FAILED) for b in rec.batches)


def apply_cluster(
    stack: str,
    digest: str,
    nodes: list[NodeHealth],
    policy: HealthPolicy,
    budget: int,
    store: Store,
    slurm: Scheduler,
    remedy: Callable[[dict[str, str]], Nodes],
    out: Callable[[str], None] = print,
    now: float | None = None,
    replace: Callable[[str], str] | None = None,
) -> list[Outcome]:
    """Act on the nodes judged to act (`NodeHealth.acts`); each one's outcome. The caller holds
    the stack's lock. `replace(node)`: the target's (rackform/targets/runtime.py), for nodes
    whose action is `replace`."""
    now = time.time() if now is None else now
    since = now - policy.retry_window_hours * 3600
    outcomes: list[Outcome] = []
    acting = [n for n in nodes if n.acts]
    failed = failures(store, since) if acting else Counter()
    ticket = [n for n in acting if n.action == "drain"]
    ticket += [n for n in acting if n not in ticket and failed[n.node] >= GIVE_UP_AFTER]
    for n in ticket:
        why = "; ".join(e.detail for e in n.evidence) or n.action
        if n.action != "drain":
            why = (
                f"{n.action} failed {GIVE_UP_AFTER} times in {policy.retry_window_hours} h:"
                f" replace or repair the node ({why})"
            )
        bad = _out(slurm, n.node, f"rackform heal: {why}")
        store.audit("ticket", kind="heal", node=n.node, action=n.action, why=why)
        outcomes.append(Outcome(n.node, n.action, "failed" if bad else "drained", bad or why))
    swap = [n for n in acting if n not in ticket and n.action == "replace"]
    for n in swap:
        outcomes.append(_replace(n, slurm, policy, store, replace))
    remediate = [n for n in acting if n not in ticket and n not in swap]
    if not remediate:
        return outcomes
    actions = {n.node: n.action for n in remediate}
    # The record's `new` holds each node's action: a killed run's successor finishes it.
    rec = new_record(stack, digest, "heal", [[n] for n in actions], {}, actions)
    store.write(rec)
    store.audit("heal", kind="heal", nodes=actions)
    roll = Roll(store, rec, _policy(policy), budget, slurm, remedy(actions), out, kind="heal")
    roll.run()
    for b in rec.batches:
        (node,) = b.nodes
        status = {DONE: "done", FAILED: "failed"}.get(b.status, "waits")
        outcomes.append(Outcome(node, actions[node], status, b.why))
    return outcomes


def resume(store: Store, rec: Record, policy: HealthPolicy, budget: int, slurm, remedy, out):
    """Finish a remediation a killed run left (its record's batches not done nor failed)."""
    actions = dict(rec.new)
    return Roll(store, rec, _policy(policy), budget, slurm, remedy(actions), out, kind="heal").run()
