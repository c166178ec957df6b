"""The bare-metal target's part of the running world: what every on-premises target does."""

from __future__ import annotations

from rackform.targets.onprem.runtime import OnPremRuntime


class BareMetalRuntime(OnPremRuntime):
    type = "bare_metal"
    label = "bare metal"


RUNTIME = BareMetalRuntime()
