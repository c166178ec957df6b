"""What a node that configured itself reports to the controller, and the controller's wait for
every node's report.

A node that pulls its configuration (fetches its pinned artifact, runs what is its own, checks
itself) posts one JSON report at the end to the controller's boot server (`serve.BootServer`):

    {"node": "gpu-node-07.rack-3", "artifact": "<sha256 it ran>", "outcome": "configured",
     "error": "", "checks": [<check records>]}

`outcome` is "configured" or "failed" (`error` says why), and `checks` are its host checks in
the validators' record format (their `Check`: name, status pass | fail | not-run,
measured, expected, unit, detail). The records are held to the same rules as there (a pass
carries a figure, a not-run a reason); this module cannot import the validators (they are not
installed with rackform), and a test checks that the two agree.

One parser, `parse`, is used by the server before it writes a report and by `judge` when it
reads one back: a file in the reports directory is a report that was accepted. The reports
directory holds one file per node, `<node>.json`, replaced whole (the server writes a new file
and renames it over the old one), so a reader never sees half a report. Give each run of `up`
its own directory: a report left from an earlier run is read as this one's.

`judge` sorts the expected nodes, once; `wait` judges until every node has reported or the
deadline passes. A node is:

- passed: it ran the pinned artifact, says configured, and its checks pass by the one rule of
  `evidence.verdict` (no check failed, at least one passed: `"checks": []` proves
  nothing and is a failure);
- failed: it says failed, or its checks do not pass (the failed checks are named);
- stale: it ran another artifact than the blueprint's (its image or user data is older): a
  warning, and not validated: its configuration is not the blueprint's;
- missing: no report by the deadline.

The cluster is validated only when every expected node passed. `rackform up` records its wait
as one check of the cluster's validation report (`Judged.check`, named `boot_reports`), so a
cluster whose nodes did not all pass at boot is not validated there either.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackform.evidence.boot_record import BOOT_CHECK
from rackform.evidence.verdict import verdict

# A report is a few checks; a node's report larger than this is no report (the server refuses
# the body before reading it).
MAX_REPORT_BYTES = 256 * 1024
OUTCOMES = ("configured", "failed")
STATUSES = ("pass", "fail", "not-run")
# Node names are DNS names or Slurm node names: letters, digits, hyphens, dots, underscores,
# starting with a letter or digit (so never `.`, `..` or a path), at most 253 characters. A name
# is also its report's file name.
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
SHA256 = re.compile(r"[0-9a-f]{64}")
# Where a node's own account of its bootstrap is (the node script's LOG).
NODE_LOG = "/var/log/rackform-bootstrap.log"


class ReportError(ValueError):
    """A report that is not one: malformed JSON, a missing or wrong field, a bad check record."""


def valid_node(name: str) -> bool:
    return isinstance(name, str) and NODE_NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class Report:
    node: str
    artifact: str
    outcome: str
    error: str
    checks: tuple[dict[str, Any], ...]

    def to_json(self) -> str:
        doc = {
            "node": self.node,
            "artifact": self.artifact,
            "outcome": self.outcome,
            "error": self.error,
            "checks": list(self.checks),
        }
        return json.dumps(doc, indent=1, allow_nan=False) + "\n"


def _no_constant(name: str) -> Any:
    raise ReportError(f"{name} is not JSON")


def parse(raw: bytes, node: str) -> Report:
    """The report `raw` posted for `node`, or ReportError saying what is wrong with it."""
    if len(raw) > MAX_REPORT_BYTES:
        raise ReportError(f"report is {len(raw)} bytes; at most {MAX_REPORT_BYTES}")
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"report is not JSON: {exc}") from None
    except RecursionError:  # `[[[[...` nested deeper than the parser recurses
        raise ReportError("report is nested too deep") from None
    if not isinstance(doc, dict):
        raise ReportError("report is not a JSON object")
    if doc.get("node") != node:
        raise ReportError(f"report names node {doc.get('node')!r}, posted for {node!r}")
    artifact = doc.get("artifact")
    if not isinstance(artifact, str) or not SHA256.fullmatch(artifact):
        raise ReportError(f"`artifact` is not a sha256: {artifact!r}")
    outcome, error = doc.get("outcome"), doc.get("error", "")
    if outcome not in OUTCOMES:
        raise ReportError(f"`outcome` {outcome!r} is not one of {OUTCOMES}")
    if not isinstance(error, str):
        raise ReportError("`error` is not a string")
    checks = doc.get("checks")
    if not isinstance(checks, list):
        raise ReportError("report has no `checks` list")
    return Report(node, artifact, outcome, error, tuple(_check(c) for c in checks))


def _check(raw: Any) -> dict[str, Any]:
    """One check record, by the validators' rules for one (`Check.__post_init__`, `checks_of`)."""
    if not isinstance(raw, dict) or not {"name", "status", "measured", "expected"} <= set(raw):
        raise ReportError(f"malformed check record: {raw!r}")
    name, status = raw["name"], raw["status"]
    if not isinstance(name, str) or not name:
        raise ReportError(f"check name {name!r} is not a name")
    if status not in STATUSES:
        raise ReportError(f"check {name!r}: status {status!r} is not one of {STATUSES}")
    measured = raw["measured"]
    if status == "pass" and (
        measured is None or (isinstance(measured, float) and not math.isfinite(measured))
    ):
        raise ReportError(f"check {name!r}: a pass needs a measured value")
    if status == "not-run" and not raw.get("detail"):
        raise ReportError(f"check {name!r}: not-run needs a reason")
    return raw


def path_of(directory: Path, node: str) -> Path:
    if not valid_node(node):
        raise ReportError(f"{node!r} is not a node name")
    return directory / f"{node}.json"


PASSED, FAILED, STALE, MISSING = "passed", "failed", "stale", "missing"
# The check of the cluster's validation report that records `rackform up`'s wait.
# Nodes the check names, in its detail; the rest are counted.
NAMED_NODES = 10


@dataclass(frozen=True)
class NodeResult:
    node: str
    state: str  # PASSED, FAILED, STALE or MISSING
    line: str  # what happened and what to do (empty for a pass)


# The artifact every expected node should have run: one digest for all, or each node's (each
# node group has its own artifact).
Pinned = str | Mapping[str, str]


def _pin(pinned: Pinned, node: str) -> str:
    return pinned if isinstance(pinned, str) else pinned[node]


@dataclass(frozen=True)
class Judged:
    artifact: Pinned
    nodes: tuple[NodeResult, ...]
    waited_s: float = 0.0
    by_state: dict[str, list[NodeResult]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by: dict[str, list[NodeResult]] = {s: [] for s in (PASSED, FAILED, STALE, MISSING)}
        for r in self.nodes:
            by[r.state].append(r)
        object.__setattr__(self, "by_state", by)

    def names(self, state: str) -> list[str]:
        return [r.node for r in self.by_state[state]]

    @property
    def validated(self) -> bool:
        """Every expected node passed on the pinned artifact."""
        return len(self.by_state[PASSED]) == len(self.nodes)

    @property
    def complete(self) -> bool:
        """Every expected node has reported (whatever it reported)."""
        return not self.by_state[MISSING]

    def lines(self) -> list[str]:
        """One line per node that did not pass, failures first, then stale, then missing."""
        return [r.line for s in (FAILED, STALE, MISSING) for r in self.by_state[s]]

    def check(self) -> dict[str, Any]:
        """The wait as one check record (the validators' format): passed nodes against
        expected ones, naming those that did not pass and how. The same nodes in the same
        states make the same record, however long the wait took."""
        passed, expected = len(self.by_state[PASSED]), len(self.nodes)
        others = [f"{r.node} {r.state}" for s in (FAILED, STALE, MISSING) for r in self.by_state[s]]
        detail = ", ".join(others[:NAMED_NODES])
        if len(others) > NAMED_NODES:
            detail += f" and {len(others) - NAMED_NODES} more"
        if not expected:
            status, detail = "not-run", "no node configured at boot was running"
        else:
            status = "pass" if self.validated else "fail"
        return {
            "name": BOOT_CHECK,
            "status": status,
            "measured": passed,
            "expected": expected,
            "unit": "nodes",
            "detail": detail or f"every node configured at boot passed ({passed})",
        }


def judge(
    expected: Iterable[str], directory: Path, artifact: Pinned, deadline_s: float = 0.0
) -> Judged:
    """Each expected node as its report in `directory` has it, against the pinned `artifact`
    (one for all, or node -> its own) (`deadline_s`: the wait so far, for the missing nodes'
    line)."""
    return Judged(
        artifact, tuple(_one(n, directory, _pin(artifact, n), deadline_s) for n in expected)
    )


def _one(node: str, directory: Path, artifact: str, deadline_s: float) -> NodeResult:
    try:
        raw = path_of(directory, node).read_bytes()
    except FileNotFoundError:
        return NodeResult(
            node,
            MISSING,
            f"{node}: no report after {deadline_s:.0f} s: it did not boot, could not reach the"
            " controller's boot server, or is still configuring; read its console output and"
            f" {NODE_LOG} on it, then run `rackform up` again",
        )
    try:
        report = parse(raw, node)
    except ReportError as exc:  # only a file not written by the server
        return NodeResult(node, FAILED, f"{node}: its report is unreadable ({exc}); run up again")
    if report.artifact != artifact:
        return NodeResult(
            node,
            STALE,
            f"{node}: WARNING: ran artifact {report.artifact[:12]}, not the blueprint's"
            f" {artifact[:12]} (its image or user data is older than the blueprint): not"
            " validated; run `rackform up` again to configure it in full, or replace it",
        )
    passed, why = verdict({"checks": list(report.checks)})
    if report.outcome == "configured" and passed:
        return NodeResult(node, PASSED, "")
    reasons = [r for r in (report.error, why) if r]
    return NodeResult(
        node,
        FAILED,
        f"{node}: failed: {'; '.join(reasons) or 'says failed'}: read {NODE_LOG} on it,"
        " fix the cause, then replace the node or run `rackform up` again",
    )


def wait(
    expected: Iterable[str],
    directory: Path,
    artifact: Pinned,
    deadline_s: float,
    *,
    poll_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Judged:
    """Judge every `poll_s` until every expected node has reported or `deadline_s` passes;
    returns at the deadline, naming the missing nodes. Each poll reads every report again (a
    report may be replaced): about 0.03-0.07 ms a node, 0.3 s for 4,096 at most, hence the
    5 s default."""
    nodes = list(dict.fromkeys(expected))
    for n in nodes:
        path_of(directory, n)  # a bad name is the caller's error, not a missing node
        _pin(artifact, n)  # and so is a node without its artifact (KeyError)
    start = clock()
    while True:
        waited = clock() - start
        judged = judge(nodes, directory, artifact, waited)
        if judged.complete or waited >= deadline_s:
            return Judged(artifact, judged.nodes, waited)
        sleep(max(0.0, min(poll_s, deadline_s - waited)))


def recorded_value(judged: Judged) -> str:
    """The stack config value that records `judged` (its check, as JSON)."""
    return json.dumps(judged.check(), sort_keys=True, separators=(",", ":"))
