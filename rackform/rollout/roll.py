"""A rolling change carried out: its record's batches through maintenance, under the rollout
policy (the batches' jobs requeued or waited for, the re-validation's time, whether the first
failed batch stops it), and its rollback.

The first batch that fails stops the rollout (unless the policy says go on): its nodes stay
drained with the reason, the batches not reached keep the old software and their jobs. A stopped
rollout resumes (the failed batch first, from its drain), rolls back (the old software applied
again to the failed batches, validated, returned), or is abandoned (the record kept as
`abandoned`, the failed nodes left drained and named)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from rackform.blueprint.schema.rollout import RolloutPolicy
from rackform.lifecycle.clock import STEPS, Clock
from rackform.lifecycle.maintenance import (
    REQUEUE_WAIT_S,
    Jobs,
    Maintenance,
    Nodes,
    Result,
    Scheduler,
    failed,
)
from rackform.lifecycle.record import Record, Store
from rackform.lifecycle.states import Stage


@dataclass
class Roll:
    store: Store
    rec: Record
    policy: RolloutPolicy
    budget: int
    slurm: Scheduler
    nodes: Nodes
    out: Callable[[str], None] = print
    requeue_wait_s: float = REQUEUE_WAIT_S
    clock: Clock = STEPS  # each step's seconds, in its batch's record

    @cached_property
    def core(self) -> Maintenance:
        return Maintenance(
            self.store,
            self.rec,
            "rollout",
            self.budget,
            self.slurm,
            self.nodes,
            Jobs.of(self.policy.jobs, self.policy.wait_minutes, self.requeue_wait_s),
            self.policy.validate_minutes * 60,
            self.out,
            retry_failed=True,
            pause_on_failure=self.policy.pause_on_failure,
            clock=self.clock,
        )

    def run(self) -> Record:
        """Every batch not done, in order (a failed one again, from its drain); the record as
        it ends (done or stopped)."""
        return self.core.run()


def rollback(roll: Roll) -> Record:
    """The old software on every failed batch, validated, returned; the rollout then ends
    (`rolled back`), the batches not reached untouched."""
    rec, core = roll.rec, roll.core
    for i, b in enumerate(rec.batches):
        if b.status != Stage.FAILED:
            continue
        r = roll.nodes.apply(b.nodes, rec.old, reboot=rec.cls == "reboot")
        if r.ok:
            r = roll.nodes.validate(b.nodes, roll.policy.validate_minutes * 60)
        if r.ok:
            bad = failed(roll.slurm.resume(b.nodes))
            r = Result(not bad, bad)
        if not r.ok:
            core.set(i, Stage.FAILED, f"rollback: {r.why}")
            return core.stop(f"batch {i + 1} could not be rolled back: {r.why}")
        core.set(i, Stage.ROLLED_BACK)
    rec.status, rec.why = "rolled back", ""
    roll.store.write(rec)
    roll.store.audit("rolled back")
    return rec
