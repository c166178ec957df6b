"""Colocation power: how close each rack runs to its budget.

The schema already refuses a rack whose GPUs alone draw more than its budget (an error the
loader reports with the file and line). Preflight adds what the schema cannot know for sure:
a whole server draws more than its GPUs (CPUs, memory, NICs, fans; the catalog's server
power factor), so a rack whose estimated draw passes the warning share of its budget gets a
warning with the numbers.
"""

from __future__ import annotations

from collections.abc import Iterable

from rackform.plan.model import Plan
from rackform.preflight.base import Finding, Rule


class RackPowerHeadroom(Rule):
    code = "rack-power-headroom"

    def check(self, plan: Plan) -> Iterable[Finding]:
        factor = plan.figures.power.server_power_factor.value
        warn = plan.figures.power.rack_warn_fraction.value
        for k, rack in enumerate(plan.racks):
            gpu_kw = rack.gpu_kw
            server_kw = gpu_kw * factor
            share = server_kw / rack.power_kw
            if share <= warn:
                continue
            yield self.finding(
                ("target", "racks", k, "power_kw"),
                f"rack {rack.name!r}: {gpu_kw:.1f} kW of GPUs, about {server_kw:.1f} kW for "
                f"whole servers (x{factor:g}), is {share:.0%} of its {rack.power_kw:g} kW budget "
                f"(warning above {warn:.0%})",
                "move hosts to another rack, raise the budget with the site, or cap GPU power "
                "(nvidia-smi -pl) and waive with the reason",
            )


RULES: tuple[Rule, ...] = (RackPowerHeadroom(),)
