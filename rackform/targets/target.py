"""One target's three parts, as the engine puts them together from the three registries: what
it adds to the schema, to compile, and to the running world."""

from __future__ import annotations

from dataclasses import dataclass

from rackform.blueprint.targets.schema import TargetSchema
from rackform.plan.targets.compile import TargetCompiler
from rackform.targets.runtime import TargetRuntime


@dataclass(frozen=True)
class Target:
    schema: TargetSchema
    compiler: TargetCompiler
    runtime: TargetRuntime
