"""The bare-metal target's part of compile and cost: hosts listed and owned outright (compiled
as every on-premises target is), priced as the hardware amortized plus the electricity of whole
servers."""

from __future__ import annotations

from rackform.plan.model import Basis
from rackform.plan.pricing import UNPRICED, Line, TargetCost, src
from rackform.plan.targets.onprem import compile as onprem


class BareMetalCompiler(onprem.OnPremCompiler):
    type = "bare_metal"
    label = "bare metal"

    def cost(self, plan: Basis) -> TargetCost:
        t, notes = plan.target, []
        lines = onprem.hardware(plan, t.capex_usd_per_gpu, t.amortize_months, notes)
        if t.power_usd_per_kwh is None:
            notes.append(f"{UNPRICED}: no target.power_usd_per_kwh, so electricity is not priced")
        else:
            factor = plan.figures.power.server_power_factor
            groups = [g for _, g in plan.gpu_groups]
            kw = sum(g.gpus * g.gpu.power_w.value for g in groups) / 1000 * factor.value
            per_hour = kw * t.power_usd_per_kwh
            hours = plan.figures.cost.hours_per_month.value
            where = src(*[g.gpu.power_w for g in groups], factor)
            item = (
                f"{kw:.1f} kW (GPUs x{factor.value:g} for servers) at ${t.power_usd_per_kwh:g}/kWh"
            )
            lines.append(Line(item, per_hour, per_hour * hours, where))
        return TargetCost("bare metal (amortized)", tuple(lines), None, tuple(notes))


COMPILER = BareMetalCompiler()
