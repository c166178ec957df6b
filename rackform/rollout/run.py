"""A rolling change start to end, whoever asks for it: `rackform configure --rolling` or the
Pulumi configure resource when `rackform up` changes the software of a cluster with a scheduler.

The change is what differs between what the nodes run (the record of the last configuration
that finished, else what the caller knows of it) and the blueprint. One that needs no drain is
applied in place on every node at once. One that does is rolled batch by batch. A stopped rollout resumes when run again with the same blueprint;
`rollback` applies the old software to its failed batches and returns them; `abandon` ends it,
the failed nodes left drained and named."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from rackform.blueprint.schema.sections import LifecycleSpec
from rackform.lifecycle.lock import Held
from rackform.lifecycle.maintenance import Nodes, Scheduler
from rackform.lifecycle.record import FAILED, Record, RecordError, Store, new_record
from rackform.rollout.measured import measure
from rackform.rollout.plan import Basis, applied_basis, duration, rollout
from rackform.rollout.roll import Roll, rollback
from rackform.scheduler.remote import RemoteError

EXIT_HELD = 3  # another run holds the stack's rollout lock
EXIT_STOPPED = 4  # the rollout stopped: a batch failed, or the budget is used


class RollingError(Exception):
    """A rolling run refused before it touched a node: one line (exit 2)."""


@dataclass
class Cluster:
    """What a rolling run needs of the cluster, however the caller knows it."""

    stack: str
    digest: str  # the blueprint digest the change brings the nodes to
    new: Basis  # what the nodes run once changed
    nodes: Sequence[str]
    lifecycle: LifecycleSpec
    slurm: Callable[[], Scheduler]  # the scheduler's side; RemoteError where it is not reached
    ansible: Callable[[Sequence[str]], Nodes]  # the node side, running these roles (none: all)


def _failed_nodes(rec: Record) -> list[str]:
    return [n for b in rec.batches if b.status == FAILED for n in b.nodes]


def carry_out(
    c: Cluster,
    store: Store,
    out: Callable[[str], None],
    *,
    rollback_: bool = False,
    abandon: bool = False,
    known: Mapping[str, Any] | None = None,
) -> int:
    """Under the stack's lock: 0 (done, nothing to do, rolled back or abandoned), 1 (applying
    a change in place failed), EXIT_HELD, or EXIT_STOPPED. `known`: what the nodes run where the state directory has no record
    (the Pulumi state's last configuration: `{"variables", "nodes"}`)."""
    try:
        with store.lock(), ExitStack() as held:
            shared = _Shared(c, held)
            return _locked(c, store, out, rollback_, abandon, known, shared)
    except Held as exc:
        out(f"rackform configure: {exc}")
        return EXIT_HELD
    except RecordError as exc:
        raise RollingError(str(exc)) from None
    except RemoteError as exc:  # the lock on the controller could not be asked for
        raise RollingError(f"{c.stack}: {exc}; nothing was changed") from None


@dataclass
class _Shared:
    """The stack's lock on the Slurm controller, taken the first time the run is about to
    touch the cluster (a run with nothing to change asks nothing of it), held to the end: a run
    from another host (a CI runner, a cron host) finds it there, where it cannot see this
    one's files."""

    c: Cluster
    held: ExitStack
    taken: bool = False

    def __call__(self) -> None:
        if self.taken:
            return
        try:
            steps = self.c.slurm()
        except RemoteError as exc:
            raise RollingError(str(exc)) from None
        self.held.enter_context(steps.lock(self.c.stack, "rolling change"))
        self.taken = True


def _roll(c: Cluster, store: Store, rec: Record, out) -> Roll:
    try:
        slurm = c.slurm()
    except RemoteError as exc:
        raise RollingError(str(exc)) from None
    budget = c.lifecycle.budget(len(c.nodes))
    return Roll(store, rec, c.lifecycle.rollout, budget, slurm, c.ansible(rec.roles), out)


def _locked(
    c: Cluster, store: Store, out, rollback_: bool, abandon: bool, known, shared: _Shared
) -> int:
    rec = store.read()
    if abandon or rollback_:
        if not (rec and rec.live):
            raise RollingError(
                f"{c.stack}: no stopped rollout to {'abandon' if abandon else 'roll back'}"
            )
        if abandon:
            rec.status = "abandoned"
            store.write(rec)
            left = _failed_nodes(rec)
            store.audit("abandoned", drained=left)
            out(f"abandoned; still drained: {', '.join(left)}" if left else "abandoned")
            return 0
        shared()
        rec = rollback(_roll(c, store, rec, out))
        return 0 if rec.status == "rolled back" else EXIT_STOPPED
    if rec and rec.live and rec.digest != c.digest:
        at = rec.next_batch()
        raise RollingError(
            f"{c.stack}: the rollout to {rec.digest.removeprefix('sha256:')[:12]} is"
            f" {rec.status} at batch {(at or 0) + 1} of {len(rec.batches)} ({rec.why or 'running'});"
            " run it again with that blueprint to resume, or --rollback / --abandon it first"
        )
    if not (rec and rec.live):
        applied = store.applied() or known
        r = rollout(applied_basis(applied, c.lifecycle), c.new)
        if applied is None:
            out("no record of what the nodes run: every variable counts as changed")
        if not r.changes:
            out("nothing to change")
            return 0
        if not r.rolls:
            out(f"in place: {r.why}")
            shared()
            done = c.ansible(r.roles).apply(list(c.nodes), dict(c.new.variables), reboot=False)
            if not done.ok:
                out(f"rackform configure: {done.why}")
                return 1
            store.set_applied(dict(c.new.variables), dict(c.new.nodes), c.digest)
            return 0
        shared()
        out(
            f"rolling: {len(r.batches)} batches of up to {r.batch_size}, {duration(r.expected_minutes)}: {r.why}"
        )
        out(f"expected time: {r.basis}")
        old = dict(applied["variables"]) if applied else {}
        rec = new_record(c.stack, c.digest, r.cls, r.batches, old, dict(c.new.variables), r.roles)
        store.write(rec)
        store.audit("started", digest=c.digest, batches=r.batches, why=r.why)
    shared()  # a resumed rollout
    rec = _roll(c, store, rec, out).run()
    if rec.status != "done":
        return EXIT_STOPPED
    measured = measure(rec)
    store.set_applied(
        dict(c.new.variables),
        dict(c.new.nodes),
        c.digest,
        measured.as_json() if measured else None,
    )
    out("done: every batch applied, validated and back in service")
    return 0
