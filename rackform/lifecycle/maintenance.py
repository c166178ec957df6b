"""Nodes taken out of service and brought back, batch by batch: the core a rolling change and
heal both run. Within the out-of-service budget (the nodes already out, whoever took them out,
count), a batch is drained through Slurm, its jobs released (or waited for, then released: an
elastic job that can go on without the batch shrunk off it, any other requeued; lifecycle/
elastic.py; each job's fate in the audit log and the batch's record), changed (the
trigger's work: new software, a remedy), validated alone, and returned to service only on a
passing validation. The record is written after every step: a run killed at any moment resumes
at the step it had not finished, a finished batch is never touched again, and a batch that
passed is never left drained.

What a failed batch means is the trigger's to say: a rolling change stops at it (unless its
policy goes on) and takes it again from its drain when run again; heal leaves its node drained
for a person and goes on with the next."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from rackform.lifecycle.budget import batch_waits
from rackform.lifecycle.clock import STEPS, Clock
from rackform.lifecycle.elastic import Released
from rackform.lifecycle.outcome import Outcome
from rackform.lifecycle.record import Batch, Record, Store
from rackform.lifecycle.states import Stage, batch_reason
from rackform.scheduler.remote import RemoteError

# How long a requeued job may take to leave its nodes (Slurm's KillWait is 30 s).
REQUEUE_WAIT_S = 300


@dataclass(frozen=True)
class Result:
    ok: bool
    why: str = ""
    jobs: tuple[Released, ...] = ()  # a replace's: what became of the jobs on the node


class Scheduler(Protocol):
    def lock(self, stack: str, purpose: str) -> AbstractContextManager[None]: ...
    def out(self) -> set[str]: ...
    def drain(self, batch: Sequence[str], reason: str) -> list[Outcome]: ...
    def release(self, batch: Sequence[str]) -> list[Released]: ...
    def wait_idle(self, batch: Sequence[str], timeout_s: float) -> list[str]: ...
    def resume(self, batch: Sequence[str]) -> list[Outcome]: ...


class Nodes(Protocol):
    def apply(self, batch: Sequence[str], variables: Mapping[str, Any], reboot: bool) -> Result:
        """The trigger's change on the batch only (rebooting where it asks)."""
        ...

    def validate(self, batch: Sequence[str], timeout_s: float) -> Result:
        """Host checks and a smoke job on the batch only, within `timeout_s`."""
        ...


@dataclass(frozen=True)
class Jobs:
    """How a drained batch's jobs leave it: waited for up to `wait_s` first (None: not waited
    for), then requeued, each given `requeue_wait_s` to go."""

    wait_s: float | None = None
    requeue_wait_s: float = REQUEUE_WAIT_S

    @staticmethod
    def of(mode: str, wait_minutes: float, requeue_wait_s: float = REQUEUE_WAIT_S) -> Jobs:
        """From a policy's `jobs` (`requeue` | `wait`) and `wait_minutes`."""
        return Jobs(wait_minutes * 60 if mode == "wait" else None, requeue_wait_s)


def failed(outcomes: Sequence[Outcome | Released]) -> str:
    return "; ".join(f"{o.subject}: {o.detail}" for o in outcomes if not o.ok)


def release(slurm: Scheduler, nodes: Sequence[str], store: Store, trigger: str) -> list[Released]:
    """The jobs on drained `nodes` released from them (shrunk off or requeued), what became of
    each in the audit log (a `jobs` entry: which went on at reduced size, which were requeued)."""
    done = slurm.release(nodes)
    if done:
        store.audit("jobs", kind=trigger, nodes=list(nodes), jobs=[r.as_json() for r in done])
    return done


@dataclass(frozen=True)
class Emptied:
    left: list[str]  # the jobs still on the nodes (described); none: emptied
    released: list[Released]


def empty(
    slurm: Scheduler, nodes: Sequence[str], jobs: Jobs, store: Store, trigger: str
) -> Emptied:
    """Release (or, as `jobs` says, wait for, then release) the jobs on drained `nodes`; what
    became of them and what is still there."""
    if jobs.wait_s is not None:
        left = slurm.wait_idle(nodes, jobs.wait_s)
        if not left:
            return Emptied([], [])
    released = release(slurm, nodes, store, trigger)
    left = slurm.wait_idle(nodes, jobs.requeue_wait_s)
    not_released = failed(released)
    if left and not_released:
        left.append(f"not released: {not_released}")
    return Emptied(left, released)


@dataclass
class Maintenance:
    """One record's batches through maintenance. `trigger` (`rollout`, `heal`) names its audit
    entries and the Slurm reason its drains carry; `retry_failed`: a failed batch is taken
    again from its drain (else left drained); `pause_on_failure`: the first failed batch stops
    the run (else the others go on, and the run stops at the end naming the failed ones)."""

    store: Store
    rec: Record
    trigger: str
    budget: int
    slurm: Scheduler
    nodes: Nodes
    jobs: Jobs
    validate_s: float
    out: Callable[[str], None] = print
    retry_failed: bool = True
    pause_on_failure: bool = True
    clock: Clock = STEPS  # each step's seconds, in its batch's record

    def set(self, i: int, status: Stage, why: str = "") -> None:
        b = self.rec.batches[i]
        b.status, b.why = status, why
        self.store.write(self.rec)
        self.store.audit(
            "batch", kind=self.trigger, batch=i + 1, nodes=b.nodes, status=status, why=why
        )
        self.out(
            f"batch {i + 1}/{len(self.rec.batches)} [{', '.join(b.nodes)}]: {status}"
            + (f": {why}" if why else "")
        )

    def stop(self, why: str) -> Record:
        self.rec.status, self.rec.why = "stopped", why
        self.store.write(self.rec)
        self.store.audit("stopped", kind=self.trigger, why=why)
        self.out(f"stopped: {why}")
        return self.rec

    def run(self) -> Record:
        """Every batch not done, in order; the record as it ends (done or stopped)."""
        self.rec.status, self.rec.why = "running", ""
        self.store.write(self.rec)
        for i, b in enumerate(self.rec.batches):
            if b.status == Stage.DONE or (b.status == Stage.FAILED and not self.retry_failed):
                continue
            try:
                self._batch(i, b)
            except RemoteError as exc:
                return self.stop(f"batch {i + 1}: Slurm did not answer: {exc}")
            if b.status == Stage.FAILED and self.pause_on_failure:
                return self.stop(f"batch {i + 1} failed: {b.why}")
            if b.status not in (Stage.DONE, Stage.FAILED):
                return self.stop(b.why)
        failed_ = [i + 1 for i, b in enumerate(self.rec.batches) if b.status == Stage.FAILED]
        if failed_:
            return self.stop(
                f"batches {', '.join(map(str, failed_))} failed; their nodes stay drained"
            )
        self.rec.status = "done"
        self.store.write(self.rec)
        self.store.audit("done", kind=self.trigger)
        return self.rec

    def _batch(self, i: int, b: Batch) -> None:
        if b.status in (Stage.PENDING, Stage.FAILED) and not self._drain(i, b, self.clock()):
            return
        if b.status == Stage.DRAINED:
            start = self.clock()
            r = self.nodes.apply(b.nodes, self.rec.new, reboot=self.rec.cls == "reboot")
            if not r.ok:
                return self.set(i, Stage.FAILED, f"applying: {r.why}")
            b.seconds["apply"] = self.clock() - start
            self.set(i, Stage.APPLIED)
        if b.status == Stage.APPLIED:
            start = self.clock()
            r = self.nodes.validate(b.nodes, self.validate_s)
            if not r.ok:
                return self.set(i, Stage.FAILED, f"validation: {r.why}")
            b.seconds["validate"] = self.clock() - start
            self.set(i, Stage.VALIDATED)
        if b.status == Stage.VALIDATED:
            bad = failed(self.slurm.resume(b.nodes))
            if bad:
                return self.set(i, Stage.FAILED, f"returning to service: {bad}")
            self.set(i, Stage.DONE)
        return None

    def _drain(self, i: int, b: Batch, start: float) -> bool:
        """The batch drained and holding no job, within the budget; False (the batch's why
        says so) where it is not. `start`: the clock when the batch began (its drain's time,
        its jobs' requeue included, is recorded)."""
        others = self.slurm.out() - set(b.nodes)
        if b.status == Stage.PENDING:
            waits = batch_waits(i + 1, b.nodes, others, self.budget)
            if waits:
                b.why = waits
                return False
        reason = batch_reason(self.trigger, self.rec.digest, i + 1)
        bad = failed(self.slurm.drain(b.nodes, reason))
        if bad:
            self.set(i, Stage.FAILED, f"draining: {bad}")
            return False
        e = empty(self.slurm, b.nodes, self.jobs, self.store, self.trigger)
        b.jobs = [r.as_json() for r in e.released]
        if e.left:
            self.set(i, Stage.FAILED, "jobs still running: " + "; ".join(e.left))
            return False
        b.seconds["drain"] = self.clock() - start
        self.set(i, Stage.DRAINED)
        return True
