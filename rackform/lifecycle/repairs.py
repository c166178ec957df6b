"""Time to repair and time between failures, measured from a stack's audit log: each failure of
a node from its detection to its return to service, per node and per cluster. Pure: the log's
lines in, figures out.

What counts, from the entries heal and rolling changes write (`rackform/health/apply.py`,
`lifecycle/maintenance.py`, `lifecycle/replace.py`, `rollout/run.py`):

| entry | what it is here |
| --- | --- |
| `heal` (`nodes`: node -> action) | each node's failure detected (heal judged it and acts) |
| `ticket` (`node`) | a failure detected and drained for a person |
| `replace` (`node`) | a failure detected and the node given up for a new machine |
| `batch`, `kind: heal`, `status: done` | the node returned to service: the failure repaired |
| `batch`, `kind: rollout`, `status: drained` | planned maintenance begins (not a failure) |
| `batch`, `kind: rollout`, `status: failed` | the batch's nodes failed their re-validation: a failure each |
| `batch`, `kind: rollout`, `status: done` or `rolled back` | the batch's nodes returned |

A failure whose return the log does not hold (a ticket a person closed with `scontrol`, a
replaced node, a remediation that failed and left the node drained) is open: counted as a
failure, never in the time to repair (its length is not known). Where the same node is detected
again while open, the earlier failure's return was not recorded (a person returned it): it is
closed as unknown, not guessed. Entries are taken in time order, whatever their order in the
file; a line that is not a JSON object, or an entry whose fields are not what the writer writes,
is skipped and named (file and line) in the problems, never guessed at.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

DAY_S = 86400.0


@dataclass(frozen=True)
class Problem:
    """A line of the log skipped: where (`file:line`) and why."""

    where: str
    why: str

    def __str__(self) -> str:
        return f"{self.where}: {self.why}"


@dataclass(frozen=True)
class Line:
    where: str  # file:line
    entry: dict


@dataclass
class Failure:
    """One failure of one node: detected, and returned to service (None: not recorded)."""

    node: str
    cause: str  # heal's action (`reboot`, `reset`...), `ticket`, `replace`, `rollout`
    detected: float
    returned: float | None = None
    unknown_end: bool = False  # closed by a later detection: its return was never recorded

    @property
    def seconds(self) -> float | None:
        return None if self.returned is None else self.returned - self.detected

    @property
    def open(self) -> bool:
        return self.returned is None and not self.unknown_end


@dataclass
class Outage:
    """Planned maintenance of one node (a rolling change's batch): drained to returned."""

    node: str
    start: float
    end: float | None = None


@dataclass(frozen=True)
class NodeRepairs:
    node: str
    failures: int
    repaired: int
    mttr_s: float | None  # mean detection to returned, over its repaired failures


@dataclass
class Reliability:
    """One stack's failures and planned maintenance over the log's span."""

    stack: str
    failures: list[Failure] = field(default_factory=list)
    maintenance: list[Outage] = field(default_factory=list)
    first: float | None = None  # the log's first and last entry: the span it covers
    last: float | None = None

    @property
    def repaired(self) -> list[Failure]:
        return [f for f in self.failures if f.returned is not None]

    @property
    def open(self) -> list[Failure]:
        return [f for f in self.failures if f.open]

    @property
    def repair_seconds(self) -> float:
        return sum(f.seconds or 0.0 for f in self.repaired)

    @property
    def mttr_s(self) -> float | None:
        """Mean time to repair: detection to returned, over the failures whose return the log
        holds; None where none has."""
        done = self.repaired
        return self.repair_seconds / len(done) if done else None

    @property
    def tbf_s(self) -> float | None:
        """Mean time between failures in the cluster: between consecutive detections (any
        node); None with fewer than two."""
        t = sorted(f.detected for f in self.failures)
        return (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None

    def per_day(self, now: float | None = None) -> float | None:
        """Failures a day over the span the log covers (its first entry to `now`, else to its
        last entry); None where the span is empty."""
        if self.first is None:
            return None
        end = now if now is not None else self.last
        span = (end or self.first) - self.first
        return len(self.failures) / (span / DAY_S) if span > 0 else None

    def nodes(self) -> list[NodeRepairs]:
        by: dict[str, list[Failure]] = {}
        for f in self.failures:
            by.setdefault(f.node, []).append(f)
        out = []
        for node, fs in sorted(by.items()):
            done = [f.seconds for f in fs if f.seconds is not None]
            out.append(
                NodeRepairs(node, len(fs), len(done), statistics.fmean(done) if done else None)
            )
        return out

    @property
    def maintenance_seconds(self) -> float:
        return sum(o.end - o.start for o in self.maintenance if o.end is not None)


def read_lines(path: Path) -> tuple[list[Line], list[Problem]]:
    """Every line of the log at `path` that is a JSON object, located; the others as problems
    (a missing log is no lines and no problem)."""
    lines: list[Line] = []
    problems: list[Problem] = []
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return lines, problems
    for i, text in enumerate(raw.splitlines(), start=1):
        if not text.strip():
            continue
        where = f"{path}:{i}"
        try:
            entry = json.loads(text)
        except ValueError:
            problems.append(Problem(where, "not a JSON entry (cut short or edited): skipped"))
            continue
        if not isinstance(entry, dict):
            problems.append(Problem(where, "not a JSON object: skipped"))
            continue
        lines.append(Line(where, entry))
    return lines, problems


def _ts(e: dict) -> float | None:
    ts = e.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        return None  # JSON's NaN and Infinity too
    return float(ts)


def _names(value: object) -> list[str] | None:
    if isinstance(value, list) and value and all(isinstance(n, str) and n for n in value):
        return value
    return None


class _Fold:
    def __init__(self, stack: str):
        self.r = Reliability(stack)
        self.current: dict[str, Failure] = {}  # node -> its failure not yet returned
        self.out: dict[str, Outage] = {}  # node -> its planned maintenance under way

    def detect(self, node: str, cause: str, ts: float) -> None:
        prior = self.current.get(node)
        if prior is not None and cause == "rollout" and prior.cause == "rollout":
            return  # the same failed batch again (a retry that failed too): one failure
        if prior is not None:
            prior.unknown_end = True  # returned by a person, unrecorded
        f = Failure(node, cause, ts)
        self.r.failures.append(f)
        self.current[node] = f

    def returned(self, node: str, ts: float) -> None:
        f = self.current.pop(node, None)
        if f is not None:
            f.returned = ts
        o = self.out.pop(node, None)
        if o is not None:
            o.end = ts

    def step(self, line: Line, ts: float) -> str | None:
        """Takes one entry in; why it cannot be read, or None."""
        e = line.entry
        event, kind = e.get("event"), e.get("kind")
        if event == "heal":
            nodes = e.get("nodes")
            if not isinstance(nodes, dict) or not all(
                isinstance(n, str) and n and isinstance(a, str) for n, a in nodes.items()
            ):
                return "a heal entry whose `nodes` is not node -> action"
            for node, action in nodes.items():
                if node in self.current and self.current[node].cause == action:
                    continue  # judged again while its remediation is under way: one failure
                self.detect(node, action, ts)
        elif event in ("ticket", "replace"):
            node = e.get("node")
            if not isinstance(node, str) or not node:
                return f"a {event} entry without its `node`"
            if event == "replace" and e.get("ok") is False and node in self.current:
                return None  # the give-up refused: the failure it was for stays open
            self.detect(node, event, ts)
        elif event == "batch":
            return self._batch(e, kind, ts)
        return None

    def _batch(self, e: dict, kind: object, ts: float) -> str | None:
        nodes, status = _names(e.get("nodes")), e.get("status")
        if nodes is None or not isinstance(status, str):
            return "a batch entry without its `nodes` and `status`"
        if kind == "heal":
            if status == "done":
                for n in nodes:
                    self.returned(n, ts)
        elif kind == "rollout":
            if status == "drained":
                for n in nodes:
                    if n not in self.out:
                        self.out[n] = Outage(n, ts)
                        self.r.maintenance.append(self.out[n])
            elif status == "failed":
                for n in nodes:
                    self.detect(n, "rollout", ts)
            elif status in ("done", "rolled back"):
                for n in nodes:
                    self.returned(n, ts)
        return None


def reliability(lines: Iterable[Line], stack: str) -> tuple[Reliability, list[Problem]]:
    """`stack`'s failures from its log's lines (in any order: they are taken by their time),
    and the lines skipped."""
    problems: list[Problem] = []
    timed: list[tuple[float, int, Line]] = []
    for i, line in enumerate(lines):
        if line.entry.get("stack") not in (stack, None):
            continue  # another stack's entry (a log shared by hand): not this cluster's
        ts = _ts(line.entry)
        if ts is None:
            problems.append(Problem(line.where, "an entry without a time (`ts`): skipped"))
            continue
        timed.append((ts, i, line))
    timed.sort(key=lambda t: (t[0], t[1]))
    fold = _Fold(stack)
    for ts, _, line in timed:
        why = fold.step(line, ts)
        if why:
            problems.append(Problem(line.where, why + ": skipped"))
    if timed:
        fold.r.first, fold.r.last = timed[0][0], timed[-1][0]
    return fold.r, problems


def from_log(path: Path, stack: str) -> tuple[Reliability, list[Problem]]:
    lines, problems = read_lines(path)
    r, more = reliability(lines, stack)
    return r, problems + more
