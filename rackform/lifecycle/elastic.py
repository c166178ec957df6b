"""Which jobs on nodes being taken out of service go on without them, and which are requeued:
the decision heal and the rollouts' drain make for each job holding a node of a batch.

Slurm keeps a job whose node fails when it was submitted `--no-kill`, but shows that nowhere a
running job can be read: `scontrol show job` and `squeue` (its JSON too) print no such field
(Slurm 22.05; tests/lifecycle/test_elastic_release.py looks). So the elastic launcher marks its
own job: validators/elastic.py, on the job's first node, sets the job's comment to
`rackform-elastic:min=N` (N: the fewest nodes it goes on with, its `--min-nodes` or
$RACKFORM_MIN_NODES), and only where each node's agent is a job step of its own (a step over
several nodes dies whole with any of them). A job without that exact comment is not elastic here,
whatever its name says.

A marked job that runs, on nodes being taken, is shrunk off them instead of requeued:
`scontrol update JobId=J NodeList=REST`, the way Slurm documents to shrink a running job
(scontrol(1), NodeList: "Change the nodes allocated to a running job to shrink its size"). Slurm
kills the job's steps on the nodes given up (the agent there; the agents left re-form their
rendezvous and resume from the last checkpoint) and leaves its other steps and nodes as they
are. It is requeued as before when:
  - it does not run (pending jobs hold no node; completing, suspended: requeued as always);
  - the nodes left would be fewer than its minimum (or none);
  - the nodes taken include its batch host or its first node: Slurm refuses to shrink a job off
    the node its batch script runs on ("Unexpected message received", seen on Slurm 22.05), and
    the launcher's rendezvous lives on the first node, so the job cannot go on without it.
Slurm cannot give the node back to the running job: the job requeues itself at a checkpoint once
the node is back in service (validators/elastic.py, `requeue_when_back`)."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

# The mark validators/elastic.py writes (ELASTIC_MARK there: the two must agree, a test says so).
MARK = "rackform-elastic:min="
_MARK = re.compile(r"rackform-elastic:min=([1-9][0-9]{0,5})")
# A node name as Slurm's NodeName and the blueprint take it (blueprint/schema/names.py NODE):
# what goes back to scontrol's NodeList= is checked against it.
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,62}")

REDUCED, REQUEUED, FAILED = "reduced", "requeued", "failed"


def min_nodes(comment: str) -> int | None:
    """The fewest nodes a marked job goes on with; None where the comment is not the mark."""
    m = _MARK.fullmatch(comment.strip())
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class Held:
    """A job holding nodes, as Slurm shows it (squeue's %i, %T, %N expanded, %B, %k)."""

    id: str
    state: str
    nodes: tuple[str, ...]
    batch_host: str
    comment: str


SHRINK, REQUEUE, LEAVE = "shrink", "requeue", "leave"


@dataclass(frozen=True)
class Decision:
    job: str
    action: str  # SHRINK (to `keep`) | REQUEUE | LEAVE (it no longer holds a node taken)
    why: str
    keep: tuple[str, ...] = ()  # SHRINK: the nodes it goes on with


def decide(job: Held, taken: Collection[str]) -> Decision:
    """Shrink `job` off the nodes `taken`, or requeue it (the module's rules)."""
    floor = min_nodes(job.comment)
    if floor is None:
        return Decision(job.id, REQUEUE, "not an elastic job (no rackform-elastic mark)")
    if job.state != "RUNNING":
        return Decision(job.id, REQUEUE, f"{job.state}, not running")
    keep = tuple(n for n in job.nodes if n not in taken)
    if len(keep) == len(job.nodes):
        return Decision(job.id, LEAVE, "holds none of the nodes taken any more")
    anchors = {job.batch_host, *job.nodes[:1]}
    lost_anchor = sorted(anchors & set(taken))
    if lost_anchor:
        why = f"its first node {lost_anchor[0]} is taken (its batch script, the rendezvous)"
        return Decision(job.id, REQUEUE, why)
    have = f"{len(keep)} of {len(job.nodes)} nodes"
    if len(keep) < floor:
        return Decision(job.id, REQUEUE, f"{have} left, below its minimum {floor}")
    if not all(_NODE.fullmatch(n) for n in keep):
        return Decision(job.id, REQUEUE, "a node name Slurm gave is not one rackform passes on")
    return Decision(job.id, SHRINK, f"{have}, its minimum {floor}", keep)


@dataclass(frozen=True)
class Released:
    """What became of one job on the nodes taken: went on at reduced size on `nodes`, requeued,
    or neither (failed, why)."""

    job: str
    how: str  # REDUCED | REQUEUED | FAILED
    why: str
    nodes: tuple[str, ...] = ()  # REDUCED: the nodes it goes on with

    @property
    def subject(self) -> str:
        return self.job

    @property
    def ok(self) -> bool:
        return self.how != FAILED

    @property
    def detail(self) -> str:
        if self.how == REDUCED:
            return f"went on at reduced size on {','.join(self.nodes)} ({self.why})"
        return f"requeued ({self.why})" if self.how == REQUEUED else self.why

    def as_json(self) -> dict:
        return {"job": self.job, "how": self.how, "nodes": list(self.nodes), "why": self.why}
