"""Utilization rules: what the blueprint's expected GPU utilization costs, and whether the way
the capacity is bought suits it.

A run should keep its GPUs above the target utilization (85%); shared cloud VMs typically
reach about 65%. Paying for a month of GPUs that are busy a share u of the time buys the work
a share u / target of them would do at the target, so the gap costs (1 - u / target) of the
month. Dedicated hardware pays off above about 70% sustained utilization; on-demand cloud
capacity is the expensive way to run that busy.
"""

from __future__ import annotations

from collections.abc import Iterable

from rackform.plan.model import Plan
from rackform.preflight.base import Finding, Rule

PATH = ("workload", "expected_utilization_pct")


def _usd(v: float) -> str:
    return f"${v:,.0f}"


class UtilizationGap(Rule):
    code = "utilization-gap"

    def check(self, plan: Plan) -> Iterable[Finding]:
        gap = plan.cost.utilization  # priced once, with the plan
        if gap is None or not plan.gpu_groups or gap.expected_pct >= gap.target_pct:
            return
        target = gap.target_pct
        money = ""
        if gap.usd_per_month is not None:
            money = f": about {_usd(gap.usd_per_month)}/month of GPUs paid for and idle"
        if gap.run_usd is not None:
            money += f", and the run costs {_usd(gap.run_usd)} more than at {target:g}%"
        yield self.finding(
            PATH,
            f"expected GPU utilization {gap.expected_pct:g}% is below the "
            f"{target:g}% target{money}",
            "find the idle time (input pipeline, checkpoint stalls, failed-node restarts, "
            "queueing) before buying; or waive with the reason",
        )


class UtilizationOwnership(Rule):
    code = "utilization-ownership"

    def check(self, plan: Plan) -> Iterable[Finding]:
        w = plan.workload
        if w is None or w.expected_utilization_pct is None:
            return
        breakeven = plan.figures.utilization.owned_breakeven_fraction.value * 100
        u = w.expected_utilization_pct
        if plan.owned and u < breakeven:
            yield self.finding(
                PATH,
                f"owned GPUs ({plan.target_type}) expected at {u:g}% utilization: dedicated hardware "
                f"pays off above about {breakeven:g}% sustained",
                "share the cluster with more work, or rent cloud capacity for this load",
            )
        elif plan.on_demand and u >= breakeven:
            cheaper = [
                f"{it.key} capacity blocks at ${it.capacity_block_usd_hr.value:g}/h vs "
                f"${it.on_demand_usd_hr.value:g}/h on-demand"
                for it in (g.instance for g in plan.node_groups)
                if it is not None
                and it.capacity_block_usd_hr is not None
                and it.on_demand_usd_hr is not None
            ]
            hint = f" (catalog: {'; '.join(dict.fromkeys(cheaper))})" if cheaper else ""
            yield self.finding(
                PATH,
                f"on-demand capacity expected at {u:g}% utilization: above about "
                f"{breakeven:g}% sustained, committed or owned capacity is cheaper{hint}",
                "use market: capacity-block or a reservation with a savings plan, or owned "
                "hardware; or waive with the reason",
            )


RULES: tuple[Rule, ...] = (UtilizationGap(), UtilizationOwnership())
