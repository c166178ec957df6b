"""`rackform up`'s wait for the nodes configured at boot, as the stack records it: one check,
named `boot_reports`, kept as JSON in the stack's config and added by the Validate stage to the
report it makes (the wait itself is the boot package's)."""

from __future__ import annotations

import json
from typing import Any

BOOT_CHECK = "boot_reports"


def recorded_check(value: str | None) -> dict[str, Any] | None:
    """The check a stack config value records; None for none. A value that is no such check
    (edited by hand) is a failed check saying so: it never passes for a wait."""
    if not value:
        return None
    try:
        check = json.loads(value)
    except ValueError:
        check = None
    if (
        isinstance(check, dict)
        and check.get("name") == BOOT_CHECK
        and check.get("status") in ("pass", "fail", "not-run")
    ):
        return check
    return {
        "name": BOOT_CHECK,
        "status": "fail",
        "measured": None,
        "expected": None,
        "unit": "nodes",
        "detail": "the stack's record of `rackform up`'s wait is unreadable: run `rackform up` "
        "again",
    }
