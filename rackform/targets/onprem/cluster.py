"""A cluster on hosts that already exist: bare metal, or colocation with its site and racks.

Each host is registered with the Host dynamic provider (SSH reachability and facts). Colocation
adds a Site and a Rack per rack with its power budget and the GPU power planned into it; whether
a rack is over budget is the blueprint's rule (schema), checked before anything runs, and is not
checked again here.
"""

from __future__ import annotations

import pulumi

from rackform.catalog import load_catalog
from rackform.targets.onprem.hosts import Host, HostProvider
from rackform.plan.model import ClusterSpec


def rack_gpu_kw(spec: ClusterSpec) -> dict[str, float]:
    """GPU power planned into each rack, in kW (catalog watts per GPU x GPUs per host)."""
    cat = load_catalog()
    out: dict[str, float] = {}
    for g in spec.node_groups:
        watts = cat.gpu(g.gpu).power_w.value * g.gpus_per_node if g.gpu else 0.0
        for h in g.hosts:
            if h.rack:
                out[h.rack] = out.get(h.rack, 0.0) + watts / 1000
    return {k: round(v, 3) for k, v in out.items()}


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

    def __init__(self, name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions | None = None):
        target = spec.target
        props = {"site": target.site, "racks": len(target.racks)}
        super().__init__("rackform:colo:Site", name, props, opts)
        draw = rack_gpu_kw(spec)
        self.racks = {
            r.name: Rack(
                f"{name}-{r.name}",
                r.name,
                r.power_kw,
                draw.get(r.name, 0.0),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for r in target.racks
        }
        self.register_outputs(props)


class OnPremCluster(pulumi.ComponentResource):
    """Registered hosts, grouped by node group (and, in a colocation site, by rack)."""

    nodes: pulumi.Output  # {node group: [[host name, address, port], ...]}
    node_resources: list[pulumi.Resource]

    def __init__(
        self,
        name: str,
        spec: ClusterSpec,
        opts: pulumi.ResourceOptions | None = None,
        provider: HostProvider | None = None,
    ):
        super().__init__("rackform:onprem:Cluster", name, None, opts)
        target = spec.target
        parents: dict[str, pulumi.Resource] = {}
        if target.type == "colocation":
            site_opts = pulumi.ResourceOptions(parent=self)
            parents = dict(Site(f"{spec.stack}-site", spec, opts=site_opts).racks)
        provider = provider or HostProvider()
        site = getattr(target, "site", None)
        per_group: list[pulumi.Output] = []
        self.node_resources = []
        for g in spec.node_groups:
            hosts = []
            for h in g.hosts:
                host = Host(
                    f"{spec.stack}-{h.name}",
                    {
                        "name": h.name,
                        "address": h.address,
                        "port": h.port,
                        "user": target.ssh_user,
                        "rack": h.rack,
                        "site": site,
                        "gpu": g.gpu,
                        "gpus_per_node": g.gpus_per_node,
                        "nvme": list(h.nvme),
                    },
                    provider=provider,
                    opts=pulumi.ResourceOptions(parent=parents.get(h.rack or "", self)),
                )
                self.node_resources.append(host)
                hosts.append(pulumi.Output.all(h.name, host.address, host.port))
            per_group.append(pulumi.Output.all(*hosts))
        names = [g.name for g in spec.node_groups]
        self.nodes = pulumi.Output.all(*per_group).apply(
            lambda lists: {n: [list(x) for x in hs] for n, hs in zip(names, lists, strict=True)}
        )
        self.register_outputs({"nodes": self.nodes})
