"""The bare-metal target's part of the running world: what every on-premises target does."""

from __future__ import annotations

from rackform.plan.targets.bare_metal.compile import COMPILER
from rackform.targets.onprem.runtime import OnPremRuntime


class BareMetalRuntime(OnPremRuntime):
    type = "bare_metal"
    label = COMPILER.label


RUNTIME = BareMetalRuntime()
