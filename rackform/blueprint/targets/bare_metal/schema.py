"""The bare-metal target: hosts that already exist, owned outright."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from rackform.blueprint.targets.onprem.schema import OnPremSchema, OnPremTarget, OwnedHardware


class BareMetalTarget(OnPremTarget, OwnedHardware):
    type: Annotated[Literal["bare_metal"], Field(description="Hosts that already exist.")]
    power_usd_per_kwh: Annotated[float | None, Field(description="Electricity price.", gt=0)] = None


class BareMetalSchema(OnPremSchema):
    type = "bare_metal"
    model = BareMetalTarget


SCHEMA = BareMetalSchema()
