"""Check records, the JSON report and its readable table. Standard library only.

Every check says what was measured, what was expected, in which unit, and one of three
statuses: pass, fail, or not-run (with the reason). A check that could not run is never
reported as passed, and a pass always carries a measurement.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

PASS, FAIL, NOT_RUN = "pass", "fail", "not-run"
STATUSES = (PASS, FAIL, NOT_RUN)
OPS = {">=": lambda m, e: m >= e, "<=": lambda m, e: m <= e, "==": lambda m, e: m == e}


class ReportError(ValueError):
    """A report that breaks the rules above (a malformed file, or a pass without a figure)."""


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    measured: Any
    expected: Any
    unit: str = ""
    op: str = ""  # how measured compares to expected: ">=", "<=", "==" (empty: no comparison)
    detail: str = ""  # why it failed or did not run, or a note on how it was measured
    node: str = ""  # the host it ran on, for per-node checks

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ReportError(
                f"check {self.name!r}: status {self.status!r} is not one of {STATUSES}"
            )
        if self.status == PASS and (self.measured is None or _bad_float(self.measured)):
            raise ReportError(f"check {self.name!r}: a pass needs a measured value")
        if self.status == NOT_RUN and not self.detail:
            raise ReportError(f"check {self.name!r}: not-run needs a reason")
        if self.op and self.op not in OPS:
            raise ReportError(f"check {self.name!r}: unknown comparison {self.op!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["measured"], d["expected"] = _json_value(self.measured), _json_value(self.expected)
        return d


def _bad_float(v: Any) -> bool:
    return isinstance(v, float) and not math.isfinite(v)


def _json_value(v: Any) -> Any:
    # NaN and infinity are not JSON; keep them readable rather than dropping them.
    return str(v) if _bad_float(v) else v


def compare(
    name: str,
    measured: Any,
    expected: Any,
    unit: str = "",
    op: str = ">=",
    *,
    detail: str = "",
    node: str = "",
    no_threshold: str = "no threshold set",
) -> Check:
    """Pass when `measured op expected` holds. No expectation: not-run (the figure is still
    shown). No measurement, or a NaN one: fail, since the thing that should have produced it
    ran and did not."""
    if expected is None:
        return Check(name, NOT_RUN, measured, None, unit, op, _join(no_threshold, detail), node)
    if measured is None or _bad_float(measured):
        why = _join(
            f"nothing measured ({measured})" if measured is not None else "nothing measured", detail
        )
        return Check(name, FAIL, measured, expected, unit, op, why, node)
    ok = OPS[op](measured, expected)
    return Check(name, PASS if ok else FAIL, measured, expected, unit, op, detail, node)


def not_run(
    name: str,
    reason: str,
    *,
    measured: Any = None,
    expected: Any = None,
    unit: str = "",
    node: str = "",
) -> Check:
    return Check(name, NOT_RUN, measured, expected, unit, "", reason, node)


def failed(
    name: str,
    reason: str,
    *,
    measured: Any = None,
    expected: Any = None,
    unit: str = "",
    op: str = "",
    node: str = "",
) -> Check:
    return Check(name, FAIL, measured, expected, unit, op, reason, node)


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def make(checks: list[Check], **extra: Any) -> dict[str, Any]:
    """The report document: checks in order, a summary, `ok` (no check failed), plus any
    extra sections (job facts, raw metrics)."""
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    doc = {"ok": counts[FAIL] == 0, "summary": counts, "checks": [c.to_dict() for c in checks]}
    doc.update(extra)
    return doc


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, allow_nan=False, default=str)


def checks_of(doc: dict[str, Any]) -> list[Check]:
    """Parse a report's checks back, enforcing the same rules (a pass needs a figure...)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("checks"), list):
        raise ReportError("report has no `checks` list")
    out = []
    for raw in doc["checks"]:
        if not isinstance(raw, dict) or not {"name", "status", "measured", "expected"} <= set(raw):
            raise ReportError(f"malformed check record: {raw!r}")
        fields = {k: raw[k] for k in Check.__dataclass_fields__ if k in raw}
        out.append(Check(**fields))
    return out


def exit_code(doc: dict[str, Any]) -> int:
    """0 when no check failed, 1 otherwise (not-run checks do not fail a run)."""
    return 0 if all(c.status != FAIL for c in checks_of(doc)) else 1


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v)


def table(doc: dict[str, Any]) -> str:
    """A fixed-width table: one row per check, then the summary line."""
    checks = checks_of(doc)
    show_node = any(c.node for c in checks)
    head = [
        "CHECK",
        *(["NODE"] if show_node else []),
        "STATUS",
        "MEASURED",
        "EXPECTED",
        "UNIT",
        "DETAIL",
    ]
    rows = []
    for c in checks:
        expected = (
            f"{c.op} {fmt(c.expected)}" if c.op and c.expected is not None else fmt(c.expected)
        )
        node = [c.node or "-"] if show_node else []
        rows.append(
            [c.name, *node, c.status.upper(), fmt(c.measured), expected, c.unit or "-", c.detail]
        )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]
    lines = []
    for r in [head, *rows]:
        cells = [r[i].ljust(widths[i]) for i in range(len(widths))] + [r[-1]]
        lines.append("  ".join(cells).rstrip())
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    verdict = "FAILED" if counts[FAIL] else "PASSED"
    lines.append(
        f"\nsmoke: {verdict}: {counts[PASS]} passed, {counts[FAIL]} failed, "
        f"{counts[NOT_RUN]} not run"
    )
    return "\n".join(lines)
