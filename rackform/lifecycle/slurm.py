"""The Slurm steps of taking nodes out of service and back, on the cluster's controller: which
nodes are out of service now, drain a batch, requeue the jobs running there, wait until the
batch holds no job, and return it to service; and the stack's lock there (the lease). Every
command runs through a Runner (SSH to the controller, or this machine with a local Slurm)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from rackform.lifecycle.drain import SCONTROL, drain, node_states
from rackform.lifecycle.lease import controller_lock
from rackform.lifecycle.outcome import Outcome
from rackform.lifecycle.states import out_of_service
from rackform.scheduler import queue
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
REQUEUE = (
    SCONTROL
    + SAY
    + r"""for j in "$@"; do sc requeue "$j"; say "$j" $?; done
"""
)


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

    def requeue(self, batch: Sequence[str]) -> list[Outcome]:
        """Each job on the batch requeued (Slurm signals it, and it runs again from its last
        checkpoint wherever Slurm places it), or why not (a job submitted --no-requeue)."""
        jobs = [j.id for j in self.jobs_on(batch)]
        if not jobs:
            return []
        try:
            return _outcomes(jobs, self.run(REQUEUE, jobs, 60), "requeued")
        except RemoteError as exc:
            return [Outcome(j, False, str(exc)) for j in jobs]

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
