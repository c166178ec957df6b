"""A colocation site and its racks as Pulumi components. Each rack records its power budget and
the GPU power the plan put into it; whether a rack is over budget is the blueprint's rule
(schema), checked before anything runs, and is not checked again here."""

from __future__ import annotations

import pulumi

from rackform.plan.model import Plan


class Rack(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        rack: str,
        power_kw: float,
        gpu_kw: float,
        opts: pulumi.ResourceOptions | None = None,
    ):
        props = {"rack": rack, "power_kw": power_kw, "gpu_kw": gpu_kw}
        super().__init__("rackform:colo:Rack", name, props, opts)
        self.register_outputs(props)


class Site(pulumi.ComponentResource):
    """A colocation site and its racks; hosts are registered under their rack."""

    racks: dict[str, Rack]

    def __init__(self, name: str, plan: Plan, opts: pulumi.ResourceOptions | None = None):
        props = {"site": plan.target.site, "racks": len(plan.racks)}
        super().__init__("rackform:colo:Site", name, props, opts)
        self.racks = {
            r.name: Rack(
                f"{name}-{r.name}",
                r.name,
                r.power_kw,
                r.gpu_kw,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for r in plan.racks
        }
        self.register_outputs(props)
