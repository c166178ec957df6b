"""A cluster on hosts that already exist (bare metal, colocation): each host is registered with
the Host dynamic provider (SSH reachability and facts), grouped by node group and, where the
target has racks, under the rack it sits in (`racks`: the colocation adapter's Site)."""

from __future__ import annotations

from collections.abc import Callable

import pulumi

from rackform.plan.model import Plan
from rackform.targets.onprem.hosts import Host, HostProvider


class OnPremCluster(pulumi.ComponentResource):
    """Registered hosts, grouped by node group (and, in a colocation site, by rack)."""

    nodes: pulumi.Output  # {node group: [[host name, address, port], ...]}
    node_resources: list[pulumi.Resource]

    def __init__(
        self,
        name: str,
        plan: Plan,
        opts: pulumi.ResourceOptions | None = None,
        provider: HostProvider | None = None,
        racks: Callable[[pulumi.Resource], dict[str, pulumi.Resource]] | None = None,
        site: str | None = None,
    ):
        super().__init__("rackform:onprem:Cluster", name, None, opts)
        # Hosts sit under the component of their rack, where the target has racks.
        parents = racks(self) if racks else {}
        provider = provider or HostProvider()
        per_group: list[pulumi.Output] = []
        self.node_resources = []
        for g in plan.node_groups:
            hosts = []
            for h in g.hosts:
                host = Host(
                    f"{plan.stack}-{h.name}",
                    {
                        "name": h.name,
                        "address": h.address,
                        "port": h.port,
                        "user": plan.ssh_user,
                        "rack": h.rack,
                        "site": site,
                        "gpu": g.gpu_key,
                        "gpus_per_node": g.gpus_per_node,
                        "nvme": list(h.nvme),
                    },
                    provider=provider,
                    opts=pulumi.ResourceOptions(parent=parents.get(h.rack or "", self)),
                )
                self.node_resources.append(host)
                hosts.append(pulumi.Output.all(h.name, host.address, host.port))
            per_group.append(pulumi.Output.all(*hosts))
        names = [g.name for g in plan.node_groups]
        self.nodes = pulumi.Output.all(*per_group).apply(
            lambda lists: {n: [list(x) for x in hs] for n, hs in zip(names, lists, strict=True)}
        )
        self.register_outputs({"nodes": self.nodes})
