"""Slurm's job records, from either of the two places Slurm writes them:

- `jobcomp/filetxt` (JobCompLoc, the slurm role's /var/log/slurm/jobcomp.log): one line per job
  that ended, space-separated `Key=Value` fields in the order of JOB_FORMAT in Slurm's
  src/plugins/jobcomp/filetxt/jobcomp_filetxt.c (22.05 to today). A job's name and its work
  directory may hold spaces, and Array*/Het* appear only for such jobs; times are the
  controller's local time (`%FT%T`) or `Unknown`. `Tres=` is what the job asked for (Slurm
  writes the request there);
- `sacct --parsable2 --noheader --format=JobID,User,Account,Partition,State,Start,End,
  ElapsedRaw,AllocTRES,NodeList`: one `|`-separated line per job or step (steps, `12.batch`,
  are left out: their job's line counts them), a header line allowed.

Either way a job's GPUs are the `gres/gpu` count in its TRES; None where the TRES names no GPU
(rackform.scheduler.usage says what that means). Parsing is pure; a line that is neither is an
error naming the file, the line and the field."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

# JOB_FORMAT's keys in its order. The values of NAME_LIKE may hold spaces; the others are one
# word (possibly empty).
JOBCOMP_KEYS = (
    "JobId", "UserId", "GroupId", "Name", "JobState", "Partition", "TimeLimit", "StartTime",
    "EndTime", "NodeList", "NodeCnt", "ProcCnt", "WorkDir", "ReservationName", "Tres",
    "Account", "QOS", "WcKey", "Cluster", "SubmitTime", "EligibleTime", "ArrayJobId",
    "ArrayTaskId", "HetJobId", "HetJobOffset", "DerivedExitCode", "ExitCode",
)  # fmt: skip
NAME_LIKE = frozenset({"Name", "WorkDir"})
# Each field is optional (older or newer Slurm may lack one) but in this order; a name-like
# value is as short as lets the rest of the line parse, so a job named `a JobState=x` still
# parses as that name. A line cut short inside a key (`... EndTi`) ends in a word with no `=`:
# `cut` takes it, so the fields before it are still placed (without it the lazy name would
# swallow them all, and the error would name fields that are there).
_JOBCOMP = re.compile(
    "^"
    + "".join(
        f"(?:{' ' if i else ''}{k}=(?P<{k}>{'.*?' if k in NAME_LIKE else '[^ ]*'}))?"
        for i, k in enumerate(JOBCOMP_KEYS)
    )
    + "(?: (?P<cut>[^ =]+))?$"
)
SACCT_FIELDS = (
    "JobID", "User", "Account", "Partition", "State", "Start", "End", "ElapsedRaw", "AllocTRES",
    "NodeList",
)  # fmt: skip
SACCT_FORMAT = ",".join(SACCT_FIELDS)
_NO_TIME = frozenset({"", "Unknown", "unknown", "None", "N/A"})
_GPU = re.compile(r"(?:^|,)gres/gpu(?::[^=,]+)?=(\d+)")
_GPU_TOTAL = re.compile(r"(?:^|,)gres/gpu=(\d+)")


class RecordError(ValueError):
    """A line that is not a job record, located: `FILE:LINE: why`."""


@dataclass(frozen=True)
class JobRecord:
    id: str
    user: str
    account: str
    partition: str
    state: str
    start: datetime | None  # the controller's local time; None: never started
    end: datetime | None  # None: still running
    elapsed_s: float | None  # sacct's ElapsedRaw (to now for a running job); None: end - start
    gpus: int | None  # gres/gpu in its TRES; None: the TRES names no GPU
    nodes: str  # Slurm's hostlist
    line: int

    @property
    def running(self) -> bool:
        return self.end is None and self.start is not None

    def seconds(self, now: datetime) -> float:
        """How long it held its nodes: to its end, or to `now` while it runs."""
        if self.elapsed_s is not None:
            return self.elapsed_s
        if self.start is None:
            return 0.0
        return max(((self.end or now) - self.start).total_seconds(), 0.0)


def gpus(tres: str) -> int | None:
    """`gres/gpu=N` of a TRES string (else the sum of its typed `gres/gpu:TYPE=N`); None where
    it names no GPU."""
    total = _GPU_TOTAL.search(tres)
    if total:
        return int(total.group(1))
    typed = _GPU.findall(tres)
    return sum(map(int, typed)) if typed else None


def _time(value: str, field: str) -> datetime | None:
    if value.strip() in _NO_TIME:
        return None
    try:
        return datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"{field} {value!r} is not a time (YYYY-MM-DDTHH:MM:SS)") from None


def _user(value: str) -> str:
    """`alice(1001)` -> `alice`."""
    return value.split("(", 1)[0]


def _jobcomp(line: str, n: int) -> JobRecord:
    m = _JOBCOMP.match(line)
    if m is None:
        raise ValueError("not a jobcomp/filetxt record (its fields are not in Slurm's order)")
    f = {k: v for k, v in m.groupdict().items() if v is not None}
    cut = f.pop("cut", None)
    lacking = [k for k in ("JobId", "JobState", "StartTime", "EndTime") if k not in f]
    if lacking:
        raise ValueError(
            f"no {'=, '.join(lacking)}= (a record cut short, or fields out of Slurm's order)"
        )
    if cut is not None:
        raise ValueError(f"a record cut short: it ends in {cut!r}, part of a field")
    start, end = _time(f["StartTime"], "StartTime"), _time(f["EndTime"], "EndTime")
    return JobRecord(
        id=f["JobId"],
        user=_user(f.get("UserId", "")),
        account=f.get("Account", ""),
        partition=f.get("Partition", ""),
        state=f["JobState"],
        start=start,
        # A record is written when the job ends: an unknown end is its start (never ran).
        end=end or start,
        elapsed_s=None,
        gpus=gpus(f.get("Tres", "")),
        nodes=f.get("NodeList", ""),
        line=n,
    )


def _sacct(line: str, n: int) -> JobRecord | None:
    values = line.split("|")
    if len(values) != len(SACCT_FIELDS):
        raise ValueError(
            f"{len(values)} '|'-separated fields, sacct --format={SACCT_FORMAT} gives "
            f"{len(SACCT_FIELDS)}"
        )
    f = dict(zip(SACCT_FIELDS, (v.strip() for v in values), strict=True))
    if f["JobID"] == "JobID" or "." in f["JobID"]:
        return None  # the header, or a step (its job's line counts it)
    elapsed = f["ElapsedRaw"]
    if elapsed and not elapsed.isdigit():
        raise ValueError(f"ElapsedRaw {elapsed!r} is not a number of seconds")
    start, end = _time(f["Start"], "Start"), _time(f["End"], "End")
    state = f["State"].split(" ", 1)[0]  # `CANCELLED by 1001`
    return JobRecord(
        id=f["JobID"],
        user=f["User"],
        account=f["Account"],
        partition=f["Partition"],
        state=state,
        start=start,
        end=end,
        elapsed_s=float(elapsed) if elapsed else None,
        gpus=gpus(f["AllocTRES"]),
        nodes=f["NodeList"],
        line=n,
    )


def parse(text: str, source: str) -> Iterator[JobRecord]:
    """Every job of a jobcomp log or of sacct's output (blank lines skipped); RecordError at
    the first line that is neither."""
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        try:
            if line.startswith("JobId="):
                yield _jobcomp(line, n)
            elif "|" in line:
                rec = _sacct(line, n)
                if rec is not None:
                    yield rec
            else:
                raise ValueError(
                    "neither a jobcomp/filetxt record (JobId=...) nor sacct --parsable2 output"
                )
        except ValueError as exc:
            raise RecordError(f"{source}:{n}: {exc}") from None
