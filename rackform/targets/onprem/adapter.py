"""What the bare-metal and colocation adapters share: hosts that already exist, listed in the
blueprint and registered (checked over SSH, their facts recorded), never created or wiped."""

from __future__ import annotations

from rackform.targets.base import Adapter
from rackform.targets.onprem import compile as onprem
from rackform.targets.onprem import schema as onprem_schema


class OnPremAdapter(Adapter):
    fabrics = ("infiniband", "roce", "ethernet")
    nodes_listed = True
    owned = True

    def rules(self, bp, catalog):
        return onprem_schema.rules(bp, catalog)

    def group_rules(self, purpose, groups, catalog):
        return onprem_schema.group_rules(self.type, groups, catalog)

    def idle_actions(self, purpose: str) -> tuple[str, ...]:
        # Owned hardware is never destroyed by a reaper: it is powered off or drained.
        return ("notify", "power-off", "drain")

    def idle_rules(self, bp):
        return super().idle_rules(bp) + onprem_schema.idle_rules(bp)

    def reaper(self):
        from rackform.targets.onprem.reap import OnPremReaper

        return OnPremReaper()

    def ssh_user(self, target) -> str:
        return target.ssh_user

    def compile_group(self, bp, group, catalog):
        return onprem.compile_group(bp, group, catalog)

    def component(self, name, plan, opts, providers):
        from rackform.targets.onprem.cluster import OnPremCluster

        return OnPremCluster(f"{name}-hosts", plan, opts=opts, provider=providers.get("host"))
