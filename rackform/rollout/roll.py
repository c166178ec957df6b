"""Carrying a rollout out, batch by batch: within the out-of-service budget (the nodes already
out, whoever took them out, count), drain the batch through Slurm, requeue its jobs (or wait for
them), apply the new software to it, re-validate it, and return it to service only on a passing
validation. The record (rackform/rollout/record.py) is written after every step: a run killed at
any moment resumes at the step it had not finished, a finished batch is never touched again, and
a batch that passed is never left drained.

The first batch that fails stops the rollout (unless the policy says go on): its nodes stay
drained with the reason, the batches not reached keep the old software and their jobs. A stopped
rollout resumes (the failed batch first, from its drain), rolls back (the old software applied
again to the failed batches, validated, returned), or is abandoned (the record kept as
`abandoned`, the failed nodes left drained and named)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from rackform.blueprint.schema.rollout import RolloutPolicy
from rackform.reap.target import Outcome
from rackform.rollout.record import (
    APPLIED,
    DONE,
    DRAINED,
    FAILED,
    PENDING,
    ROLLED_BACK,
    VALIDATED,
    Batch,
    Record,
    Store,
)
from rackform.scheduler.remote import RemoteError

REQUEUE_WAIT_S = (
    300  # how long a requeued job may take to leave its nodes (Slurm's KillWait is 30 s)
)


@dataclass(frozen=True)
class Result:
    ok: bool
    why: str = ""


class Scheduler(Protocol):
    def lock(self, stack: str, purpose: str) -> AbstractContextManager[None]: ...
    def out(self) -> set[str]: ...
    def drain(self, batch: Sequence[str], reason: str) -> list[Outcome]: ...
    def requeue(self, batch: Sequence[str]) -> list[Outcome]: ...
    def wait_idle(self, batch: Sequence[str], timeout_s: float) -> list[str]: ...
    def resume(self, batch: Sequence[str]) -> list[Outcome]: ...


class Nodes(Protocol):
    def apply(self, batch: Sequence[str], variables: Mapping[str, Any], reboot: bool) -> Result:
        """The roles with `variables` on the batch only (rebooting where a role asks)."""
        ...

    def validate(self, batch: Sequence[str], timeout_s: float) -> Result:
        """Host checks and a smoke job on the batch only, within `timeout_s`."""
        ...


def _failed(outcomes: list[Outcome]) -> str:
    return "; ".join(f"{o.subject}: {o.detail}" for o in outcomes if not o.ok)


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
    # `rollout` or `heal`: whose record. A rollout run again retries its failed batch; heal
    # leaves a node that failed its re-validation drained for a person.
    kind: str = "rollout"
    clock: Callable[[], float] = time.monotonic  # each step's seconds, in its batch's record

    @property
    def retry_failed(self) -> bool:
        return self.kind == "rollout"

    def _set(self, i: int, status: str, why: str = "") -> None:
        b = self.rec.batches[i]
        b.status, b.why = status, why
        self.store.write(self.rec)
        self.store.audit(
            "batch", kind=self.kind, batch=i + 1, nodes=b.nodes, status=status, why=why
        )
        self.out(
            f"batch {i + 1}/{len(self.rec.batches)} [{', '.join(b.nodes)}]: {status}"
            + (f": {why}" if why else "")
        )

    def _stop(self, why: str) -> Record:
        self.rec.status, self.rec.why = "stopped", why
        self.store.write(self.rec)
        self.store.audit("stopped", kind=self.kind, why=why)
        self.out(f"stopped: {why}")
        return self.rec

    def run(self) -> Record:
        """Every batch not done, in order; the record as it ends (done or stopped)."""
        self.rec.status, self.rec.why = "running", ""
        self.store.write(self.rec)
        for i, b in enumerate(self.rec.batches):
            if b.status == DONE or (b.status == FAILED and not self.retry_failed):
                continue
            try:
                self._batch(i, b)
            except RemoteError as exc:
                return self._stop(f"batch {i + 1}: Slurm did not answer: {exc}")
            if b.status == FAILED and self.policy.pause_on_failure:
                return self._stop(f"batch {i + 1} failed: {b.why}")
            if b.status not in (DONE, FAILED):
                return self._stop(b.why)
        failed = [i + 1 for i, b in enumerate(self.rec.batches) if b.status == FAILED]
        if failed:
            return self._stop(
                f"batches {', '.join(map(str, failed))} failed; their nodes stay drained"
            )
        self.rec.status = "done"
        self.store.write(self.rec)
        self.store.audit("done", kind=self.kind)
        return self.rec

    def _batch(self, i: int, b: Batch) -> None:
        if b.status in (PENDING, FAILED) and not self._drain(i, b, self.clock()):
            return
        if b.status == DRAINED:
            start = self.clock()
            r = self.nodes.apply(b.nodes, self.rec.new, reboot=self.rec.cls == "reboot")
            if not r.ok:
                return self._set(i, FAILED, f"applying: {r.why}")
            b.seconds["apply"] = self.clock() - start
            self._set(i, APPLIED)
        if b.status == APPLIED:
            start = self.clock()
            r = self.nodes.validate(b.nodes, self.policy.validate_minutes * 60)
            if not r.ok:
                return self._set(i, FAILED, f"validation: {r.why}")
            b.seconds["validate"] = self.clock() - start
            self._set(i, VALIDATED)
        if b.status == VALIDATED:
            bad = _failed(self.slurm.resume(b.nodes))
            if bad:
                return self._set(i, FAILED, f"returning to service: {bad}")
            self._set(i, DONE)
        return None

    def _drain(self, i: int, b: Batch, start: float) -> bool:
        """The batch drained and holding no job, within the budget; False (the batch's why
        says so) where it is not. `start`: the clock when the batch began (its drain's time,
        its jobs' requeue included, is recorded)."""
        others = self.slurm.out() - set(b.nodes)
        if b.status == PENDING and len(others) + len(b.nodes) > self.budget:
            b.why = (
                f"batch {i + 1} ({len(b.nodes)} nodes) waits: {len(others)} node(s) already out of"
                f" service ({', '.join(sorted(others))}) and the budget is {self.budget}"
            )
            return False
        digest = self.rec.digest.removeprefix("sha256:")[:12]
        reason = f"rackform {self.kind} {digest} batch {i + 1}"
        bad = _failed(self.slurm.drain(b.nodes, reason))
        if bad:
            self._set(i, FAILED, f"draining: {bad}")
            return False
        left = self._empty(b)
        if left:
            self._set(i, FAILED, "jobs still running: " + "; ".join(left))
            return False
        b.seconds["drain"] = self.clock() - start
        self._set(i, DRAINED)
        return True

    def _empty(self, b: Batch) -> list[str]:
        return empty(self.slurm, b.nodes, self.policy, self.requeue_wait_s)


def empty(
    slurm: Scheduler, nodes: Sequence[str], policy: RolloutPolicy, requeue_wait_s: float
) -> list[str]:
    """Requeue (or, as the policy says, wait for, then requeue) the jobs on drained `nodes`;
    what is still there."""
    if policy.jobs == "wait":
        left = slurm.wait_idle(nodes, policy.wait_minutes * 60)
        if not left:
            return []
    not_requeued = _failed(slurm.requeue(nodes))
    left = slurm.wait_idle(nodes, requeue_wait_s)
    if left and not_requeued:
        left.append(f"not requeued: {not_requeued}")
    return left


def rollback(roll: Roll) -> Record:
    """The old software on every failed batch, validated, returned; the rollout then ends
    (`rolled back`), the batches not reached untouched."""
    rec = roll.rec
    for i, b in enumerate(rec.batches):
        if b.status != FAILED:
            continue
        r = roll.nodes.apply(b.nodes, rec.old, reboot=rec.cls == "reboot")
        if r.ok:
            r = roll.nodes.validate(b.nodes, roll.policy.validate_minutes * 60)
        if r.ok:
            bad = _failed(roll.slurm.resume(b.nodes))
            r = Result(not bad, bad)
        if not r.ok:
            roll._set(i, FAILED, f"rollback: {r.why}")
            return roll._stop(f"batch {i + 1} could not be rolled back: {r.why}")
        roll._set(i, ROLLED_BACK)
    rec.status, rec.why = ROLLED_BACK, ""
    roll.store.write(rec)
    roll.store.audit("rolled back")
    return rec


def new_record(
    stack: str, digest: str, cls: str, batches: list[list[str]], old, new, roles=()
) -> Record:
    """`roles`: the roles the change touches, the ones a batch's apply runs (none: every role)."""
    rec = Record(stack, digest, cls, [Batch(list(b)) for b in batches], dict(old), dict(new))
    rec.roles = list(roles)
    return rec
