"""The verdict on a validation report, one rule for every reader: the Validate stage that writes
it (`pulumi up` fails on it) and promotion, which reads it again from signed evidence.

A pass needs no failed check and at least one passed one: a report in which nothing passed
proved nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NOTHING_PASSED = "no check passed (none ran)"


def verdict(report: Mapping[str, Any]) -> tuple[bool, str]:
    """(passed, why not): `why` names each failed check with what it measured and expected,
    in one line; empty on a pass."""
    checks = report.get("checks") or []
    failed = [c for c in checks if c.get("status") == "fail"]
    if failed:
        return False, "; ".join(_failed(c) for c in failed)
    if not any(c.get("status") == "pass" for c in checks):
        return False, NOTHING_PASSED
    return True, ""


def _failed(check: Mapping[str, Any]) -> str:
    unit = f" {check['unit']}" if check.get("unit") else ""
    return (
        f"{check.get('name')}: measured {check.get('measured')}{unit},"
        f" expected {check.get('expected')}{unit}"
    )
