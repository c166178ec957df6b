"""`rackform heal --apply`, cluster by cluster: under the stack's lock, finish what a killed run
left, read which nodes Slurm has out of service (they use the budget), judge, and act through
the cluster's Slurm controller, the nodes' SSH and BMCs, and
the roles' smoke job for re-validation. A cluster heal cannot act on (no scheduler, telemetry
unread, the lock held) is judged and reported with why it was not acted on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rackform.engine import Prepared
from rackform.health.apply import Outcome, apply_cluster, replace_unscheduled, resume, unfinished
from rackform.health.reported import Reported, revalidated
from rackform.health.run import ClusterHealth, judge
from rackform.lifecycle.directory import state_dir
from rackform.lifecycle.lock import Held
from rackform.lifecycle.record import RecordError, Store
from rackform.lifecycle.remedy import Remedy
from rackform.lifecycle.slurm import SlurmSteps
from rackform.plan.inventory import inventory_hosts
from rackform.plan.model import Plan, thaw
from rackform.rollout.ansible import AnsibleNodes
from rackform.rollout.plan import applied_extras
from rackform.scheduler.remote import RemoteError
from rackform.targets.runtimes import cluster_inventory, controller, node, runtime
from rackform.telemetry.prometheus import Prometheus


@dataclass
class Access:
    state: Path | None = None
    private_key: Path | None = None
    known_hosts: Path | None = None
    report_dir: Path | None = None


def _remedy(
    plan: Plan, inv: dict, access: Access, out, applied: dict | None
) -> Callable[[dict[str, str]], Remedy]:
    """`inv`: the cluster's inventory (the plan's, or with the nodes its stack runs now);
    `applied`: the record of the last configuration that finished (its extra variables are the
    re-validation's too)."""
    target = runtime(plan.target_type)

    def runner(name: str):
        return node(plan, name, access.private_key, access.known_hosts)

    def bmc(name: str):
        return target.bmc(plan, name)

    nodes = AnsibleNodes(
        inv, thaw(plan.group_vars), access.private_key, access.known_hosts,
        access.report_dir, out, applied_extras(plan, applied),
    )  # fmt: skip
    return lambda actions: Remedy(actions, runner, bmc, nodes.validate)


def _unscheduled(plan: Plan, store: Store, judged, target) -> tuple[ClusterHealth, list, str]:
    """No scheduler to drain through: only `replace` acts (a serving group's node, whose group
    launches the successor); any other action is left, and said why."""
    why = "heal drains nodes through Slurm and the blueprint declares no scheduler"
    try:
        with store.lock():
            ch = judged()
            if ch.error or (ch.breaker and ch.breaker.tripped):
                return ch, [], ""
            done = replace_unscheduled(
                ch.nodes, plan.lifecycle.health, store, lambda n: target.replace(plan, n)
            )
    except Held as exc:
        return judged(), [], str(exc)
    left = [n.node for n in ch.nodes if n.acts and n.action != "replace"]
    return ch, done, (f"{why} (not acted on: {', '.join(left)})" if left else "")


def heal_cluster(
    p: Prepared, prom: Prometheus, at: float, access: Access, out, reported: Reported | None = None
) -> tuple[ClusterHealth, list[Outcome], str]:
    """The cluster judged (`reported`: its last validation report, if given), what was done,
    and why nothing was done where nothing was."""
    plan = p.plan
    store = Store(state_dir(access.state), plan.stack, kind="heal")

    def judged(out_now: frozenset[str] = frozenset()) -> ClusterHealth:
        return judge(p, prom, at, out_now, reported, revalidated(store) if reported else None)

    if plan.lifecycle.health is None or plan.lifecycle.health.notify_only:
        return judged(), [], ""
    target = runtime(plan.target_type)
    if plan.scheduler is None:
        return _unscheduled(plan, store, judged, target)
    try:
        inv = cluster_inventory(plan)
        hosts = inventory_hosts(inv)
        budget = plan.lifecycle.budget(len(hosts))
        ctl = controller(plan, access.private_key, access.known_hosts)
        slurm = SlurmSteps(ctl, hosts)
        with store.lock(), slurm.lock(plan.stack, "heal"):
            remedy = _remedy(plan, inv, access, out, store.applied())
            rec = store.read()
            if unfinished(rec):
                resume(store, rec, plan.lifecycle.health, budget, slurm, remedy, out)
            ch = judged(frozenset(slurm.out()))
            if ch.error or (ch.breaker and ch.breaker.tripped):
                return ch, [], ""
            done = apply_cluster(
                plan.stack, plan.digest, ch.nodes, plan.lifecycle.health, ch.budget, store,
                slurm, remedy, out, replace=lambda node: target.replace(plan, node),
            )  # fmt: skip
            return ch, done, ""
    except Held as exc:
        return judged(), [], str(exc)
    except (RemoteError, RecordError) as exc:
        return judged(), [], f"not acted on: {exc}"
