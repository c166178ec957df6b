"""Compile's registry: what each target adds to the plan, its cost and what is known of its
stack before it runs, by its `type`. Pure, as compile is: it imports no target's running
world."""

from __future__ import annotations

from rackform.plan.targets.aws.compile import COMPILER as AWS
from rackform.plan.targets.bare_metal.compile import COMPILER as BARE_METAL
from rackform.plan.targets.colocation.compile import COMPILER as COLOCATION
from rackform.plan.targets.compile import TargetCompiler

COMPILERS: dict[str, TargetCompiler] = {c.type: c for c in (AWS, BARE_METAL, COLOCATION)}


def compiler(target_type: str) -> TargetCompiler:
    return COMPILERS[target_type]
