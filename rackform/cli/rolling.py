"""`rackform configure FILE --rolling [--rollback | --abandon]`: a software change rolled through
the cluster batch by batch (rackform/rollout/roll.py), its record in the state directory.

The change is what differs between the nodes' last finished configuration (its record) and the
blueprint. One that needs no drain is applied in place on every node at once. A stopped rollout
resumes when run again with the same blueprint; `--rollback` applies the old software to its
failed batches and returns them; `--abandon` ends it, the failed nodes left drained and named."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rackform.plan.inventory import inventory_hosts
from rackform.plan.model import Plan, thaw
from rackform.rollout.ansible import AnsibleNodes
from rackform.rollout.measured import measure
from rackform.rollout.plan import applied_basis, basis, duration, rollout
from rackform.rollout.record import FAILED, Held, Record, RecordError, Store, state_dir
from rackform.rollout.roll import Roll, new_record, rollback
from rackform.rollout.slurm import SlurmSteps
from rackform.scheduler.remote import RemoteError, controller

EXIT_HELD = 3  # another run holds the stack's rollout lock
EXIT_STOPPED = 4  # the rollout stopped: a batch failed, or the budget is used


class RollingError(Exception):
    """A rolling run refused before it touched a node: one line (exit 2)."""


@dataclass
class Options:
    state: Path | None = None
    private_key: Path | None = None
    known_hosts: Path | None = None
    report_dir: Path | None = None
    rollback: bool = False
    abandon: bool = False
    extras: dict = field(default_factory=dict)  # --extra-vars: over the blueprint's, every run


def _failed_nodes(rec: Record) -> list[str]:
    return [n for b in rec.batches if b.status == FAILED for n in b.nodes]


def rolling(plan: Plan, opts: Options, out: Callable[[str], None] = print) -> int:
    if plan.scheduler is None:
        raise RollingError(
            f"{plan.source}: --rolling drains nodes through Slurm and the blueprint declares no"
            " scheduler; `rackform configure` without --rolling changes every node at once"
        )
    store = Store(state_dir(opts.state), plan.stack)
    try:
        with store.lock():
            return _locked(plan, opts, store, out)
    except Held as exc:
        out(f"rackform configure: {exc}")
        return EXIT_HELD
    except RecordError as exc:
        raise RollingError(str(exc)) from None


def _ansible(plan: Plan, opts: Options, out) -> AnsibleNodes:
    inv, variables = thaw(plan.inventory), {**thaw(plan.group_vars), **opts.extras}
    return AnsibleNodes(
        inv, variables, opts.private_key, opts.known_hosts, opts.report_dir, out, opts.extras
    )


def _roll(plan: Plan, opts: Options, store: Store, rec: Record, out) -> Roll:
    nodes = inventory_hosts(plan.inventory)
    try:
        slurm = SlurmSteps(controller(plan, opts.private_key, opts.known_hosts), nodes)
    except RemoteError as exc:
        raise RollingError(str(exc)) from None
    budget = plan.lifecycle.budget(len(nodes))
    ansible = _ansible(plan, opts, out)
    ansible.roles = rec.roles
    return Roll(store, rec, plan.lifecycle.rollout, budget, slurm, ansible, out)


def _locked(plan: Plan, opts: Options, store: Store, out) -> int:
    rec = store.read()
    if opts.abandon or opts.rollback:
        if not (rec and rec.live):
            raise RollingError(
                f"{plan.stack}: no stopped rollout to {'abandon' if opts.abandon else 'roll back'}"
            )
        if opts.abandon:
            rec.status = "abandoned"
            store.write(rec)
            left = _failed_nodes(rec)
            store.audit("abandoned", drained=left)
            out(f"abandoned; still drained: {', '.join(left)}" if left else "abandoned")
            return 0
        rec = rollback(_roll(plan, opts, store, rec, out))
        return 0 if rec.status == "rolled back" else EXIT_STOPPED
    new = basis(plan, opts.extras)
    if rec and rec.live and rec.digest != plan.digest:
        at = rec.next_batch()
        raise RollingError(
            f"{plan.stack}: the rollout to {rec.digest.removeprefix('sha256:')[:12]} is"
            f" {rec.status} at batch {(at or 0) + 1} of {len(rec.batches)} ({rec.why or 'running'});"
            " run it again with that blueprint to resume, or --rollback / --abandon it first"
        )
    if not (rec and rec.live):
        applied = store.applied()
        r = rollout(applied_basis(applied, plan.lifecycle), new)
        if applied is None:
            out("no record of what the nodes run: every variable counts as changed")
        if not r.changes:
            out("nothing to change")
            return 0
        if not r.rolls:
            out(f"in place: {r.why}")
            nodes = inventory_hosts(plan.inventory)
            done = _ansible(plan, opts, out).apply(nodes, dict(new.variables), reboot=False)
            if not done.ok:
                out(f"rackform configure: {done.why}")
                return 1
            store.set_applied(dict(new.variables), thaw(new.nodes), plan.digest)
            return 0
        out(
            f"rolling: {len(r.batches)} batches of up to {r.batch_size}, {duration(r.expected_minutes)}: {r.why}"
        )
        out(f"expected time: {r.basis}")
        old = dict(applied["variables"]) if applied else {}
        rec = new_record(
            plan.stack, plan.digest, r.cls, r.batches, old, dict(new.variables), r.roles
        )
        store.write(rec)
        store.audit("started", digest=plan.digest, batches=r.batches, why=r.why)
    rec = _roll(plan, opts, store, rec, out).run()
    if rec.status != "done":
        return EXIT_STOPPED
    measured = measure(rec)
    store.set_applied(
        dict(new.variables),
        thaw(new.nodes),
        plan.digest,
        measured.as_json() if measured else None,
    )
    out("done: every batch applied, validated and back in service")
    return 0
