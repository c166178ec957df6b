"""GPU-hours and cost per job and per account from Slurm's job records (rackform.scheduler.
records) and the cluster's catalog price per GPU-hour: the seeds' "cost per run". Pure.

A job's GPUs are the `gres/gpu` of its TRES. Slurm writes it there only where it tracks GPUs
(`AccountingStorageTRES=gres/gpu`, which needs slurmdbd). So: where any record of the input
names GPUs, GPUs are tracked and a record naming none is a job that used none (0 GPU-hours);
where none does (the slurm role's cluster without the blueprint's scheduler.fairness, so without
slurmdbd), each job is charged every GPU of its nodes as the blueprint declares them: exact for
whole-node jobs, an upper bound where jobs share a node, and said so. A job still running is counted to now (sacct's elapsed time so far)
and marked running; a job that never started counts 0.

A job preempted and requeued has one record per run, under one job id (sacct shows them all
with `--duplicates`; the jobcomp log writes one as each run ends): it is one job, charged for
every run, and says how many times it ran."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from rackform.scheduler.hostlist import HostlistError, expand
from rackform.scheduler.records import JobRecord

NO_ACCOUNT = "(none)"


@dataclass(frozen=True)
class JobUsage:
    job: JobRecord  # its last run's record (its state, end and nodes)
    gpus: int  # its last run's
    gpus_from: str  # tres: its record's gres/gpu | none: its TRES names none | nodes: its nodes'
    hours: float  # every run's
    usd: float | None
    gpu_hours: float  # every run's GPUs x hours
    runs: tuple[JobRecord, ...] = ()  # every run's record, first to last

    @property
    def times_run(self) -> int:
        return max(len(self.runs), 1)

    def as_dict(self) -> dict:
        j = self.job
        first = self.runs[0] if self.runs else j
        return {
            "id": j.id,
            "user": j.user,
            "account": j.account or NO_ACCOUNT,
            "partition": j.partition,
            "state": j.state,
            "running": j.running,
            "start": first.start.isoformat() if first.start else None,
            "end": j.end.isoformat() if j.end else None,
            "nodes": j.nodes,
            "gpus": self.gpus,
            "gpus_from": self.gpus_from,
            "runs": self.times_run,
            "run_states": [r.state for r in self.runs],
            "seconds": round(self.hours * 3600),
            "hours": round(self.hours, 4),
            "gpu_hours": round(self.gpu_hours, 4),
            "usd": None if self.usd is None else round(self.usd, 2),
        }


@dataclass(frozen=True)
class AccountUsage:
    account: str
    jobs: int
    gpu_hours: float
    usd: float | None

    def as_dict(self) -> dict:
        return {
            "account": self.account,
            "jobs": self.jobs,
            "gpu_hours": round(self.gpu_hours, 4),
            "usd": None if self.usd is None else round(self.usd, 2),
        }


@dataclass
class Usage:
    jobs: list[JobUsage]
    accounts: list[AccountUsage]
    usd_per_gpu_hour: float | None
    notes: list[str] = field(default_factory=list)

    @property
    def gpu_hours(self) -> float:
        return sum(j.gpu_hours for j in self.jobs)

    @property
    def usd(self) -> float | None:
        return None if self.usd_per_gpu_hour is None else self.gpu_hours * self.usd_per_gpu_hour


def _node_gpus(job: JobRecord, node_gpus: Mapping[str, int]) -> tuple[int, list[str]]:
    """Every GPU of the job's nodes, and the nodes the blueprint does not list (0 GPUs)."""
    try:
        names = expand(job.nodes)
    except HostlistError:
        return 0, [job.nodes]
    return sum(node_gpus.get(n, 0) for n in names), [n for n in names if n not in node_gpus]


def usage(
    records: Iterable[JobRecord],
    node_gpus: Mapping[str, int],
    usd_per_gpu_hour: float | None,
    now: datetime,
    since: datetime | None = None,
) -> Usage:
    """Per job (in the input's order) and per account (most GPU-hours first). `since` keeps the
    jobs that ended at or after it, and those still running. `node_gpus`: GPUs per node name,
    as the blueprint declares them."""
    jobs = [r for r in records if since is None or r.end is None or r.end >= since]
    tracked = any(r.gpus is not None for r in jobs)
    runs: dict[str, list[JobRecord]] = {}  # per job id, in the input's order
    for r in jobs:
        runs.setdefault(r.id, []).append(r)
    out: list[JobUsage] = []
    foreign: set[str] = set()
    for records in runs.values():
        hours = gpu_hours = 0.0
        for r in records:
            if r.gpus is not None:
                gpus, source = r.gpus, "tres"
            elif tracked or not r.nodes:
                gpus, source = 0, "none"
            else:
                gpus, unknown = _node_gpus(r, node_gpus)
                foreign.update(unknown)
                source = "nodes"
            hours += r.seconds(now) / 3600
            gpu_hours += gpus * r.seconds(now) / 3600
        usd = None if usd_per_gpu_hour is None else gpu_hours * usd_per_gpu_hour
        out.append(JobUsage(records[-1], gpus, source, hours, usd, gpu_hours, tuple(records)))
    result = Usage(out, _accounts(out, usd_per_gpu_hour), usd_per_gpu_hour)
    again = sum(j.times_run > 1 for j in out)
    if again:
        result.notes.append(
            f"{again} jobs ran more than once (preempted or requeued): each is charged for "
            "every run"
        )
    charged = sum(j.gpus_from == "nodes" for j in out)
    if charged:
        result.notes.append(
            f"{charged} job records name no GPUs (Slurm writes gres/gpu into a job's TRES only "
            "where it tracks it: AccountingStorageTRES=gres/gpu, with slurmdbd, which the slurm "
            "role sets up for a blueprint with scheduler.fairness): each is charged "
            "every GPU of its nodes as the blueprint declares them, an upper bound where jobs "
            "share a node"
        )
    if foreign:
        result.notes.append(
            "nodes not in the blueprint count no GPUs: " + ",".join(sorted(foreign))
        )
    running = sum(j.job.running for j in out)
    if running:
        result.notes.append(f"{running} jobs still running: counted to now")
    if usd_per_gpu_hour is None:
        result.notes.append("the catalog has no price for this cluster: no USD")
    return result


def _accounts(jobs: list[JobUsage], usd_per_gpu_hour: float | None) -> list[AccountUsage]:
    by: dict[str, list[JobUsage]] = {}
    for j in jobs:
        by.setdefault(j.job.account or NO_ACCOUNT, []).append(j)
    out = []
    for account, js in by.items():
        hours = sum(j.gpu_hours for j in js)
        usd = None if usd_per_gpu_hour is None else hours * usd_per_gpu_hour
        out.append(AccountUsage(account, len(js), hours, usd))
    return sorted(out, key=lambda a: (-a.gpu_hours, a.account))
