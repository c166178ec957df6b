"""Node-hours in service and the failures among them, from a stack's audit log: the failure
rate a cluster measured of itself (`rackform.plan.interval.FailureRate`).

The log records events, not time in service, so each `rackform heal --apply` run also appends
an `in-service` sample: how many of the cluster's nodes were then in service (`record`).
Node-hours are the samples integrated: each sample's count held until the next sample, where
the next comes within `max_gap_s` (a gap longer than that, heal not running, is unknown time
and counts nothing, never in service). Failures are the nodes heal took out: each node of a
`heal` entry (remediated), each `ticket` whose action was a drain (a person's from the
start; a ticket after failed remediations is the same failure again, not counted twice) and
each `replace`.

Read whole and sorted by time, so entries out of order (a hand-merged log, clocks apart) count
the same; a line that is not a JSON object, or an entry without a numeric `ts`, is skipped and
counted in `skipped`."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rackform.lifecycle.audit import AuditLog

IN_SERVICE = "in-service"
MAX_GAP_S = 6 * 3600.0  # heal runs every few minutes; six hours without a run is a gap


@dataclass(frozen=True)
class Service:
    node_hours: float
    failures: int
    samples: int
    skipped: int  # lines or entries that could not be read
    gaps: int  # gaps between samples longer than max_gap_s (not counted)


def record(log: AuditLog, stack: str, in_service: int, nodes: int) -> None:
    """Append one sample: `in_service` of the cluster's `nodes` in service now."""
    log.append({"stack": stack, "event": IN_SERVICE, "in_service": in_service, "nodes": nodes})


def _lines(path: Path) -> Iterable[object]:
    if not path.exists():
        return
    with path.open("rb") as f:
        for raw in f:
            if not raw.strip():
                continue
            try:
                yield json.loads(raw)
            except ValueError:
                yield None


def _failures(e: dict) -> int:
    event = e.get("event")
    if event == "heal" and isinstance(e.get("nodes"), dict):
        return len(e["nodes"])
    if event == "ticket":
        return int(e.get("action") == "drain")
    return int(event == "replace")


def measure(path: Path, stack: str, max_gap_s: float = MAX_GAP_S) -> Service:
    """The stack's node-hours in service and failures from the log at `path`."""
    entries, skipped = [], 0
    for e in _lines(path):
        ts = e.get("ts") if isinstance(e, dict) else None
        if not isinstance(ts, int | float) or isinstance(ts, bool):
            skipped += 1
            continue
        if e.get("stack") == stack:
            entries.append(e)
    entries.sort(key=lambda e: e["ts"])
    failures = sum(_failures(e) for e in entries)
    samples = [
        (e["ts"], e["in_service"])
        for e in entries
        if e.get("event") == IN_SERVICE
        and isinstance(e.get("in_service"), int)
        and e["in_service"] >= 0
    ]
    seconds, gaps = 0.0, 0
    for (t0, n0), (t1, _) in itertools.pairwise(samples):
        if t1 - t0 > max_gap_s:
            gaps += 1
        else:
            seconds += n0 * (t1 - t0)
    return Service(seconds / 3600.0, failures, len(samples), skipped, gaps)
