"""Every preflight rule, in the order reports list them."""

from __future__ import annotations

from rackform.preflight import (
    checkpoint,
    memory,
    power,
    quotas,
    rightsizing,
    shared,
    utilization,
)
from rackform.preflight.base import Rule
from rackform.preflight.codes import CODES

RULES: tuple[Rule, ...] = (
    *memory.RULES,
    *rightsizing.RULES,
    *checkpoint.RULES,
    *shared.RULES,
    *power.RULES,
    *utilization.RULES,
    *quotas.RULES,
)


def codes() -> dict[str, str]:
    """Each rule's code and level."""
    return {r.code: r.level for r in RULES}


def missing_rules() -> list[str]:
    """Codes in `codes.py` that no rule checks (a test keeps this empty)."""
    return sorted(set(CODES) - {r.code for r in RULES})
