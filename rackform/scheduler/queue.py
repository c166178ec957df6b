"""Slurm's queue as `squeue` on the controller reports it: every job it still knows, and which of
them hold or wait for the cluster's nodes (reap's busy check: a cluster with a running or pending
job is never idle, whatever its GPUs' metrics say).

squeue is asked for every state (`--states=all`) and every partition (`--all`: hidden ones and
those the ssh user cannot submit to as well), and the states are judged here: only the end
states below are finished. Any other state, one this code has never heard of included
(COMPLETING, CONFIGURING, SUSPENDED, REQUEUED, REQUEUE_HOLD, SPECIAL_EXIT, STAGE_OUT, ...),
counts as a job, so a new Slurm state can only ever keep a cluster, never reap it. A line that
is not a job makes the whole queue unreadable (unknown), never emptier."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from rackform.scheduler.hostlist import HostlistError, expand
from rackform.scheduler.remote import RemoteError, Runner

# Slurm's end states (job_state_codes.html: the base states a job ends in) and REVOKED (a
# federated sibling that runs on another cluster instead): the job no longer holds or waits
# for nodes here. squeue shows a finished job for MinJobAge (300 s) after it ends.
DONE = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)
FIELDS = ("id", "state", "user", "account", "partition", "nodes", "reason")
# One job a line, fields in FIELDS' order split on '|' (no field squeue prints here holds one:
# a job's name, which may, is not asked for). The reason comes last.
SQUEUE = "exec squeue --all --noheader --states=all --format='%i|%T|%u|%a|%P|%N|%r'\n"
TIMEOUT_S = 60
_JOB_ID = re.compile(r"\d+(?:[_+][0-9A-Za-z\[\]\-,%]+)?")
_STATE = re.compile(r"[A-Z][A-Z_]*")


class QueueError(RemoteError):
    """squeue failed, or answered something that is not its queue: one line."""


@dataclass(frozen=True)
class Job:
    id: str
    state: str
    user: str
    account: str
    partition: str
    nodes: str  # Slurm's hostlist of the nodes it holds ('' while pending)
    reason: str  # why it is pending ('None' while running)

    @property
    def active(self) -> bool:
        """Holds nodes or waits for them: any state but an end state."""
        return self.state not in DONE

    def node_names(self) -> list[str]:
        try:
            return expand(self.nodes)
        except HostlistError:
            return [self.nodes]

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in FIELDS}

    def describe(self, listed: Iterable[str] = ()) -> str:
        """`job 12 (alice, account ml, partition batch-a): RUNNING on node[1-2]`, naming the
        nodes that are not the blueprint's (`listed`), if any."""
        account = f", account {self.account}" if self.account not in ("", "(null)") else ""
        head = f"job {self.id} ({self.user}{account}, partition {self.partition}): {self.state}"
        if self.nodes:
            head += f" on {self.nodes}"
            foreign = sorted(set(self.node_names()) - set(listed))
            if foreign and listed:
                head += f" (not the blueprint's: {','.join(foreign)})"
        if self.reason not in ("", "None", "(null)"):
            head += f" ({self.reason})"
        return head


def parse(text: str) -> list[Job]:
    """squeue's lines as jobs. Blank lines and padding around fields are allowed; a line that
    is not a job (a message, a cut line, another format) is a QueueError naming it."""
    jobs = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split("|", len(FIELDS) - 1)]
        if len(fields) != len(FIELDS):
            raise QueueError(f"squeue line {n} is not a job ({len(fields)} fields): {line!r}")
        job = Job(*fields)
        if not _JOB_ID.fullmatch(job.id) or not _STATE.fullmatch(job.state):
            raise QueueError(f"squeue line {n} is not a job (id, state): {line!r}")
        jobs.append(job)
    return jobs


def read(run: Runner) -> list[Job]:
    """Every job the controller's Slurm knows; QueueError where squeue failed (slurmctld down,
    no squeue on the host) or answered garbage, RemoteError where the host was not reached."""
    done = run(SQUEUE, (), TIMEOUT_S)
    if done.rc != 0:
        raise QueueError(f"squeue failed on {run.where}: {done.why()}")
    return parse(done.stdout)


def active(jobs: Iterable[Job]) -> list[Job]:
    return [j for j in jobs if j.active]
