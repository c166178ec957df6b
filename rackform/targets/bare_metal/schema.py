"""The bare-metal target: hosts that already exist, owned outright."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from rackform.targets.onprem.schema import OnPremTarget


class BareMetalTarget(OnPremTarget):
    type: Annotated[Literal["bare_metal"], Field(description="Hosts that already exist.")]
    capex_usd_per_gpu: Annotated[
        float | None, Field(description="Hardware cost per GPU, for amortized cost reports.", gt=0)
    ] = None
    amortize_months: Annotated[
        int, Field(description="Months to amortize hardware over.", ge=1)
    ] = 36
    power_usd_per_kwh: Annotated[float | None, Field(description="Electricity price.", gt=0)] = None
