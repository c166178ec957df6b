"""A cluster on hosts that already exist (bare metal, colocation): each host is registered with
the Host dynamic provider (SSH reachability and facts), grouped by node group and, where the
target has racks, under the rack it sits in (`racks`: the colocation runtime's Site)."""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Callable, Iterator

import pulumi

from rackform.plan.model import Plan
from rackform.stack.outputs import gathered
from rackform.targets.onprem.hosts import Host, HostProvider

# What pulumi.dynamic's serialize_provider replaces on the pure-Python pickler and never puts back.
_PICKLER_PATCHED = ("_batch_setitems", "save_dict")


@contextlib.contextmanager
def sdk_pickler_kept() -> Iterator[None]:
    """Put back what constructing a dynamic resource changes on `pickle._Pickler`.

    Every `pulumi.dynamic.Resource` pickles its provider with `serialize_provider`, which sets
    `pickle._Pickler._batch_setitems` to a sorting wrapper around whatever is there at the time
    and never restores it (pulumi 3.x): after N dynamic resources, pickling any dict goes through
    N nested wrappers. At about 1,000 hosts that is deeper than Python's recursion limit
    (RecursionError inside the SDK), and before that the work is quadratic. Restoring the
    pickler after each resource keeps the depth at one wrapper whatever the number of hosts.
    The cluster's other dynamic resources, Configure and Validate, are two per program (two
    wrappers, whatever its size); `rackform.stack.offline` also restores the pickler after each
    recorded run, so plans made one after another in one process do not add up.
    """
    saved = {
        n: pickle._Pickler.__dict__[n] for n in _PICKLER_PATCHED if n in pickle._Pickler.__dict__
    }
    try:
        yield
    finally:
        for n in _PICKLER_PATCHED:
            if n in saved:
                setattr(pickle._Pickler, n, saved[n])
            elif n in pickle._Pickler.__dict__:
                delattr(pickle._Pickler, n)


def by_group(groups: list[tuple[str, list[str]]], flat: list) -> dict[str, list[list]]:
    """{group: [[host name, address, port], ...]} from each group's host names, in order, and
    every host's address and port in one list, in the same order. A port comes back from the
    engine as a double (Host declares no output types to the SDK): an int again here."""
    pairs = list(zip(flat[::2], flat[1::2], strict=True))
    if len(pairs) != sum(len(names) for _, names in groups):
        raise ValueError(f"{len(pairs)} hosts' outputs for {groups}")
    out: dict[str, list[list]] = {}
    at = 0
    for group, names in groups:
        mine = pairs[at : at + len(names)]
        at += len(names)
        out[group] = [
            [n, address, int(port)] for n, (address, port) in zip(names, mine, strict=True)
        ]
    return out


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
        self.node_resources = []
        for g in plan.node_groups:
            for h in g.hosts:
                with sdk_pickler_kept():
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
        # {group: [[host name, address, port], ...]} from the hosts' own outputs, gathered once
        # over every host's two scalars (an Output.all per host, then per group, would copy
        # each host's list twice more: `stack.outputs`).
        groups = [(g.name, [h.name for h in g.hosts]) for g in plan.node_groups]
        self.nodes = gathered(
            [out for host in self.node_resources for out in (host.address, host.port)]
        ).apply(lambda flat: by_group(groups, flat))
        self.register_outputs({"nodes": self.nodes})
