"""The verdict on a validation report, one rule for every reader: the Validate stage that writes
it (`pulumi up` fails on it) and promotion, which reads it again from signed evidence.

A pass needs no failed check and at least one passed one: a report in which nothing passed
proved nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NOTHING_PASSED = "no check passed (none ran)"
# Failed checks named in the one line; a cluster-wide failure (a check failing on every node of
# hundreds) is counted past these.
NAMED = 5


def verdict(report: Mapping[str, Any]) -> tuple[bool, str]:
    """(passed, why not): `why` names the failed checks with what each measured and expected,
    in one line (the first NAMED, then how many more); empty on a pass."""
    checks = report.get("checks") or []
    failed = [c for c in checks if c.get("status") == "fail"]
    if failed:
        why = "; ".join(_failed(c) for c in failed[:NAMED])
        more = len(failed) - NAMED
        return False, why + (f"; and {more} more failed check(s)" if more > 0 else "")
    if not any(c.get("status") == "pass" for c in checks):
        return False, NOTHING_PASSED
    return True, ""


def _failed(check: Mapping[str, Any]) -> str:
    unit = f" {check['unit']}" if check.get("unit") else ""
    return (
        f"{check.get('name')}: measured {check.get('measured')}{unit},"
        f" expected {check.get('expected')}{unit}"
    )
