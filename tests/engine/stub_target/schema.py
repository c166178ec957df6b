"""What the stub target adds to the blueprint: its section, a node-group field of its own
(`flavor`), the fabrics it has, its idle actions, and one rule that needs the whole blueprint."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from rackform.blueprint.schema.base import Strict, Violation
from rackform.blueprint.targets.schema import TargetSchema


class StubTarget(Strict):
    type: Annotated[Literal["stub"], Field(description="Stub machines (tests only).")]
    usd_per_node_hour: Annotated[float, Field(description="Price of one machine.", gt=0)]


class StubGroupFields(Strict):
    flavor: Annotated[str | None, Field(description="Machine flavor (stub only).")] = None


class StubSchema(TargetSchema):
    type = "stub"
    model = StubTarget
    group_fields = StubGroupFields
    fabrics = ("ethernet",)

    def idle_actions(self, purpose):
        return ("notify", "stop")

    def rules(self, bp, catalog):
        return [
            Violation(("node_groups", i, "flavor"), "a stub node group needs a flavor", "add one")
            for i, g in enumerate(bp.node_groups)
            if not g.flavor
        ]


SCHEMA = StubSchema()
