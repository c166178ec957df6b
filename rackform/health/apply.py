"""`rackform heal --apply` for one cluster: the nodes the verdict says heal acts on now, each
taken through maintenance as a batch of one: within the out-of-service budget (read live from
Slurm), drained, its jobs released (or waited for: an elastic job that can go on without the
node shrunk off it, any other requeued; lifecycle/elastic.py), remediated, re-validated alone and returned
to service only on a passing report. A node whose action is `drain`, or whose remediation
already failed twice in the policy's window, is drained and named for a person (the audit log's
`ticket`); one whose action is `replace` is given up for a new machine. A node that fails its
re-validation stays drained with the reason; heal does not retry it on its own.

The record (`<stack>.heal.json`), lock and audit log are the stack's in the state directory: a
heal run and a rolling change never take nodes out at once, and a run killed mid-remediation is
finished by the next run before it judges anew."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from rackform.blueprint.schema.health import HealthPolicy
from rackform.health.verdict import GIVE_UP_AFTER, NodeHealth, ticket_why, triage
from rackform.lifecycle.audit_view import Fold, view
from rackform.lifecycle.clock import WALL, Clock
from rackform.lifecycle.elastic import Released
from rackform.lifecycle.maintenance import Jobs, Maintenance, Nodes, Scheduler, release
from rackform.lifecycle.record import DONE, FAILED, Record, Store, new_record
from rackform.lifecycle.replace import replace as give_up
from rackform.lifecycle.service import record as in_service
from rackform.lifecycle.states import TICKET

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
    # What became of the jobs on the node when it was drained: each went on at reduced size
    # (`reduced`, with the nodes it kept), was requeued, or neither (`failed`).
    jobs: list[dict] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"node": self.node, "action": self.action, "status": self.status,
                "why": self.why, "jobs": self.jobs}  # fmt: skip

    def job_lines(self) -> list[str]:
        """`job 12: went on at reduced size on node1 (1 of 2 nodes, its minimum 1)`, each."""
        return [
            f"job {j['job']}: " + Released(j["job"], j["how"], j["why"], tuple(j["nodes"])).detail
            for j in self.jobs
        ]


def _jobs(policy: HealthPolicy) -> Jobs:
    return Jobs.of(policy.jobs, policy.wait_minutes)


def _maintenance(
    store: Store, rec: Record, policy: HealthPolicy, budget: int, slurm, nodes: Nodes, out
) -> Maintenance:
    """Heal's batches through the core: a node that fails stays drained for a person (never
    taken again on its own), and one failing never stops the others."""
    return Maintenance(
        store, rec, "heal", budget, slurm, nodes, _jobs(policy), policy.validate_minutes * 60,
        out, retry_failed=False, pause_on_failure=False,
    )  # fmt: skip


def _out(slurm: Scheduler, node: str, reason: str, store: Store) -> tuple[str, list[Released]]:
    """Drain `node` with `reason` and release its jobs (shrunk off or requeued, not waited
    for); why the drain failed (or ""), and what became of the jobs."""
    bad = [o for o in slurm.drain([node], reason[:200]) if not o.ok]
    released = release(slurm, [node], store, "heal")
    return (bad[0].detail if bad else ""), released


def _jobs_json(released) -> list[dict]:
    return [r.as_json() for r in released]


def _replace(
    n: NodeHealth, slurm: Scheduler | None, policy: HealthPolicy, store: Store, replace
) -> Outcome:
    why = "; ".join(e.detail for e in n.evidence) or n.action
    r = give_up(n.node, why, slurm, _jobs(policy), store, replace)
    return Outcome(n.node, n.action, "replaced" if r.ok else "failed", r.why, _jobs_json(r.jobs))


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
    clock: Clock = WALL,
) -> list[Outcome]:
    """Act on the nodes judged to act (`NodeHealth.acts`); each one's outcome. The caller holds
    the stack's lock. The failures counted are those within the policy's window before `now`
    (else the clock's time as it acts). `replace(node)`: the target's, for nodes whose action is
    `replace`."""
    now = clock() if now is None else now
    # The node-hours in service a measured failure rate is counted over (lifecycle.service).
    in_service(store.log, stack, sum(not n.out_of_service for n in nodes), len(nodes))
    acting = [n for n in nodes if n.acts]
    since = now - policy.retry_window_hours * 3600
    t = triage(acting, failures(store, since) if acting else Counter())
    outcomes: list[Outcome] = []
    for n in t.ticket:
        why = ticket_why(n, policy)
        bad, released = _out(slurm, n.node, f"{TICKET} {why}", store)
        store.audit("ticket", kind="heal", node=n.node, action=n.action, why=why)
        status = "failed" if bad else "drained"
        outcomes.append(Outcome(n.node, n.action, status, bad or why, _jobs_json(released)))
    for n in t.swap:
        outcomes.append(_replace(n, slurm, policy, store, replace))
    if not t.remediate:
        return outcomes
    actions = {n.node: n.action for n in t.remediate}
    # The record's `new` holds each node's action: a killed run's successor finishes it.
    rec = new_record(stack, digest, "heal", [[n] for n in actions], {}, actions)
    store.write(rec)
    store.audit("heal", kind="heal", nodes=actions)
    _maintenance(store, rec, policy, budget, slurm, remedy(actions), out).run()
    for b in rec.batches:
        (node,) = b.nodes
        status = {DONE: "done", FAILED: "failed"}.get(b.status, "waits")
        outcomes.append(Outcome(node, actions[node], status, b.why, list(b.jobs)))
    return outcomes


def resume(store: Store, rec: Record, policy: HealthPolicy, budget: int, slurm, remedy, out):
    """Finish a remediation a killed run left (its record's batches not done nor failed)."""
    actions = dict(rec.new)
    return _maintenance(store, rec, policy, budget, slurm, remedy(actions), out).run()
