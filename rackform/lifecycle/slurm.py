"""The Slurm steps of taking nodes out of service and back, on the cluster's controller: which
nodes are out of service now, drain a batch, release the jobs running there (an elastic job
shrunk off the batch, any other requeued: lifecycle/elastic.py), wait until the batch holds no
job, and return it to service; and the stack's lock there (the lease). Every
command runs through a Runner (SSH to the controller, or this machine with a local Slurm)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from rackform.lifecycle.drain import SCONTROL, drain, node_states
from rackform.lifecycle.elastic import (
    FAILED,
    REDUCED,
    REQUEUE,
    REQUEUED,
    SHRINK,
    Decision,
    Held,
    Released,
    decide,
)
from rackform.lifecycle.lease import controller_lock
from rackform.lifecycle.outcome import Outcome
from rackform.lifecycle.states import out_of_service
from rackform.scheduler import queue
from rackform.scheduler.hostlist import HostlistError, expand
from rackform.scheduler.remote import RemoteError, Runner

# scontrol as the drain runs it (`sc`, through `sudo -n` where Slurm refuses the ssh user).
# Each subject one line `subject|ok|` or `subject|failed|why`.
SAY = r"""say() { if [ "$2" = 0 ]; then printf '%s|ok|\n' "$1"; else printf '%s|failed|%s\n' "$1" "$(echo "$out" | tr '\n|' '  ')"; fi; }
"""
RESUME = (
    SCONTROL
    + SAY
    + r"""for n in "$@"; do sc update nodename="$n" state=resume; say "$n" $?; done
"""
)
REQUEUE_JOBS = (
    SCONTROL
    + SAY
    + r"""for j in "$@"; do sc requeue "$j"; say "$j" $?; done
"""
)
# $1 job, $2 the nodes it keeps, and so on: each job shrunk to its nodes (scontrol(1), NodeList).
SHRINK_JOBS = (
    SCONTROL
    + SAY
    + r"""while [ $# -ge 2 ]; do sc update jobid="$1" nodelist="$2"; say "$1" $?; shift 2; done
"""
)
# What queue.read does not ask for: each job's batch host and comment (the elastic mark). One
# job a line, the comment last (it may hold a '|'). $1: the jobs, comma-separated.
HELD = "exec squeue --all --noheader --states=all --jobs=\"$1\" --format='%i|%T|%N|%B|%k'\n"


def _outcomes(subjects: Sequence[str], done, ok: str) -> list[Outcome]:
    seen = {}
    for line in done.stdout.splitlines():
        subject, _, rest = line.partition("|")
        result, _, message = rest.partition("|")
        seen[subject] = Outcome(subject, result == "ok", ok if result == "ok" else message.strip())
    return [seen.get(s) or Outcome(s, False, done.why()) for s in subjects]


@dataclass
class SlurmSteps:
    run: Runner
    nodes: Sequence[str]  # the cluster's nodes: only these count against the budget
    poll_s: float = 5.0
    sleep: Callable[[float], None] = time.sleep

    def lock(self, stack: str, purpose: str) -> AbstractContextManager[None]:
        """The stack's lock on the controller, where every run against the cluster sees it
        (lock.Held where another has it)."""
        return controller_lock(self.run, stack, purpose)

    def out(self) -> set[str]:
        """The cluster's nodes out of service now; RemoteError where sinfo cannot say."""
        states = node_states(self.run)
        return {n for n in self.nodes if n in states and out_of_service(states[n])}

    def drain(self, batch: Sequence[str], reason: str) -> list[Outcome]:
        return drain(self.run, batch, reason)

    def jobs_on(self, batch: Sequence[str]) -> list[queue.Job]:
        """Jobs that hold a node of the batch (running, completing, suspended...)."""
        return [
            j
            for j in queue.active(queue.read(self.run))
            if j.nodes and set(j.node_names()) & set(batch)
        ]

    def held(self, jobs: Sequence[str]) -> dict[str, Held]:
        """`jobs` as the elastic decision reads them; a job squeue did not show (ended since,
        or squeue failed) is missing."""
        done = self.run(HELD, [",".join(jobs)], 60)
        seen = {}
        for line in done.stdout.splitlines() if done.rc == 0 else []:
            fields = line.strip().split("|", 4)
            if len(fields) != 5 or fields[0] not in jobs:
                continue
            try:
                nodes = tuple(expand(fields[2])) if fields[2] else ()
            except HostlistError:
                continue
            seen[fields[0]] = Held(fields[0], fields[1], nodes, fields[3], fields[4])
        return seen

    def release(self, batch: Sequence[str]) -> list[Released]:
        """Each job on the batch released from it: an elastic job that can go on without the
        batch shrunk off it, any other requeued (Slurm signals it, and it runs again from its
        last checkpoint wherever Slurm places it), or why neither (a job submitted
        --no-requeue). A shrink Slurm refuses falls back to the requeue."""
        jobs = [j.id for j in self.jobs_on(batch)]
        if not jobs:
            return []
        try:
            seen = self.held(jobs)
        except RemoteError:
            seen = {}
        unread = "its batch host and comment not read"
        decisions = [decide(seen[j], batch) if j in seen else Decision(j, REQUEUE, unread)
                     for j in jobs]  # fmt: skip
        out = self._shrink([d for d in decisions if d.action == SHRINK])
        again = [d for d in decisions if d.action == REQUEUE] + [
            Decision(r.job, REQUEUE, r.why) for r in out if r.how == FAILED
        ]
        return [r for r in out if r.how == REDUCED] + self._requeue(again)

    def _shrink(self, shrink: list[Decision]) -> list[Released]:
        if not shrink:
            return []
        args = [a for d in shrink for a in (d.job, ",".join(d.keep))]
        ids = [d.job for d in shrink]
        try:
            said = _outcomes(ids, self.run(SHRINK_JOBS, args, 60), "shrunk")
        except RemoteError as exc:
            said = [Outcome(j, False, str(exc)) for j in ids]
        return [
            Released(d.job, REDUCED, d.why, d.keep) if o.ok
            else Released(d.job, FAILED, f"not shrunk: {o.detail}")
            for d, o in zip(shrink, said, strict=True)
        ]  # fmt: skip

    def _requeue(self, decisions: list[Decision]) -> list[Released]:
        if not decisions:
            return []
        ids = [d.job for d in decisions]
        try:
            said = _outcomes(ids, self.run(REQUEUE_JOBS, ids, 60), "requeued")
        except RemoteError as exc:
            said = [Outcome(j, False, str(exc)) for j in ids]
        return [
            Released(d.job, REQUEUED, d.why) if o.ok
            else Released(d.job, FAILED, f"not requeued: {o.detail} ({d.why})")
            for d, o in zip(decisions, said, strict=True)
        ]  # fmt: skip

    def wait_idle(self, batch: Sequence[str], timeout_s: float) -> list[str]:
        """Wait until no job holds a node of the batch; the jobs still there at the deadline
        (described), none when it emptied in time."""
        end = time.monotonic() + timeout_s
        while True:
            left = self.jobs_on(batch)
            if not left or time.monotonic() >= end:
                return [j.describe(self.nodes) for j in left]
            self.sleep(self.poll_s)

    def resume(self, batch: Sequence[str]) -> list[Outcome]:
        try:
            return _outcomes(batch, self.run(RESUME, batch, 60), "back in service")
        except RemoteError as exc:
            return [Outcome(n, False, str(exc)) for n in batch]
