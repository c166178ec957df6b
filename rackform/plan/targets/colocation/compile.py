"""The colocation target's part of compile and cost: the GPU power planned into each rack, and
the price of the committed kW plus the hardware amortized."""

from __future__ import annotations

from rackform.blueprint.targets.colocation import schema
from rackform.plan.model import Basis, RackPlan
from rackform.plan.pricing import UNPRICED, Line, TargetCost
from rackform.plan.targets.onprem import compile as onprem


class ColocationCompiler(onprem.OnPremCompiler):
    type = "colocation"
    label = "colocation"

    def compile_target(self, bp, groups, catalog):
        draw = schema.rack_gpu_kw(bp.target.racks, bp.node_groups, catalog)
        return None, tuple(RackPlan(r.name, r.power_kw, draw[r.name]) for r in bp.target.racks)

    def cost(self, plan: Basis) -> TargetCost:
        t, notes = plan.target, []
        hours = plan.figures.cost.hours_per_month.value
        lines = []
        if t.usd_per_kw_month is None:
            notes.append(
                f"{UNPRICED}: no target.usd_per_kw_month, so space and power are not priced"
            )
        else:
            kw = sum(r.power_kw for r in plan.racks)
            month = kw * t.usd_per_kw_month
            item = f"{kw:g} kW committed in {len(plan.racks)} rack(s) at ${t.usd_per_kw_month:g}/kW-month"
            lines.append(Line(item, month / hours, month, "target.usd_per_kw_month"))
        lines += onprem.hardware(plan, t.capex_usd_per_gpu, t.amortize_months, notes)
        return TargetCost("colocation", tuple(lines), None, tuple(notes))


COMPILER = ColocationCompiler()
