"""The colocation target's part of the running world: its hosts are registered like bare metal's,
each under the rack it sits in, and the racks under the site."""

from __future__ import annotations

from rackform.plan.targets.colocation.compile import COMPILER
from rackform.targets.onprem.runtime import OnPremRuntime


class ColocationRuntime(OnPremRuntime):
    type = "colocation"
    label = COMPILER.label

    def component(self, name, plan, opts, providers):
        # Pulumi loads only for the program, not for every command.
        import pulumi

        from rackform.targets.colocation.site import Site
        from rackform.targets.onprem.cluster import OnPremCluster

        def racks(parent):
            site = Site(f"{plan.stack}-site", plan, opts=pulumi.ResourceOptions(parent=parent))
            return dict(site.racks)

        return OnPremCluster(
            f"{name}-hosts",
            plan,
            opts=opts,
            provider=providers.get("host"),
            racks=racks,
            site=plan.target.site,
        )


RUNTIME = ColocationRuntime()
