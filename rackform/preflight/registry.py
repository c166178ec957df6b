"""Every preflight rule, in the order reports list them: the shared ones, then each target's."""

from __future__ import annotations

from rackform.catalog.codes import CODES
from rackform.preflight import (
    checkpoint,
    memory,
    power,
    rightsizing,
    serving,
    shared,
    topology,
    utilization,
)
from rackform.preflight.base import Rule
from rackform.preflight.targets.aws import capacity as aws_capacity
from rackform.preflight.targets.aws import quotas as aws_quotas

RULES: tuple[Rule, ...] = (
    *memory.RULES,
    *rightsizing.RULES,
    *serving.RULES,
    *checkpoint.RULES,
    *shared.RULES,
    *power.RULES,
    *topology.RULES,
    *utilization.RULES,
    # Each target's own (a cloud's quotas), run on that target's plans only.
    *aws_quotas.RULES,
    # What EC2 says of the groups' reservations, read at `up` (offline: nothing to check).
    *aws_capacity.RULES,
)


def codes() -> dict[str, str]:
    """Each rule's code and level."""
    return {r.code: r.level for r in RULES}


def missing_rules() -> list[str]:
    """Codes in `codes` that no rule checks (a test keeps this empty)."""
    return sorted(set(CODES) - {r.code for r in RULES})
