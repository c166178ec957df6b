"""The topology compiled: each GPU node's NVLink domain and the fabric's switches, from the
blueprint's `topology` section, each node group's system (the catalog's `systems.yaml`) and
its hosts' racks. Pure: the blueprint's node groups and the compiled ones in, a `TopologyPlan`
out.

Domains: the ones the blueprint lists; every other node of a group whose system is rack-scale
(an NVL72) joins the next domain of its rack, up to the system's trays per domain, in the
order the hosts are listed (on AWS, the order the stack names its instances); any other node
is its own domain. Switches: the ones the blueprint lists, else one leaf per rack under a root
(`rackform.plan.scheduler.switches`, as Slurm's topology has always been written)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rackform.blueprint.schema.topology import TopologySpec, group_system
from rackform.catalog.systems import System, system_of_gpu
from rackform.plan.fabric import Domain, TopologyPlan
from rackform.plan.model import NodeGroupPlan
from rackform.plan.slurm import Switch


def compile_topology(
    spec: TopologySpec | None,
    declared_groups: Sequence[Any],
    groups: Sequence[NodeGroupPlan],
    members: Mapping[str, Sequence[str]],
    default_switches: tuple[Switch, ...],
) -> TopologyPlan:
    """`declared_groups`: the blueprint's node groups, in the order of `groups` (the compiled
    ones); `members`: each group's node names as the inventory holds them;
    `default_switches`: one leaf per rack under a root, for a fabric the blueprint leaves out."""
    systems = {
        g.name: group_system(d) or system_of_gpu(g.gpu_key)
        for d, g in zip(declared_groups, groups, strict=True)
    }
    racks = {h.name: h.rack for g in groups for h in g.hosts}
    gpus = {n: g.gpus_per_node for g in groups if g.has_gpus for n in members[g.name]}
    listed = spec.nvlink_domains if spec else ()
    taken = {n for d in listed for n in d.nodes}
    domains = [_domain(d.name, d.nodes, gpus, systems, groups, members) for d in listed]
    for g in groups:
        if not g.has_gpus:
            continue
        s = systems[g.name]
        free = [n for n in members[g.name] if n not in taken]
        if s is not None and s.rack_scale:
            domains += _trays(g.name, free, racks, s, gpus)
        else:
            domains += [Domain(n, (n,), gpus[n], s.key if s else None, 1) for n in free]
    declared_switches = bool(spec and spec.switches)
    switches = (
        tuple(Switch(w.name, w.nodes, w.switches) for w in spec.switches)
        if declared_switches
        else default_switches
    )
    rack_scale = any(s is not None and s.rack_scale for s in systems.values())
    return TopologyPlan(
        domains=tuple(domains),
        switches=switches,
        declared=spec is not None or rack_scale,
        switches_declared=declared_switches,
    )


def _domain(
    name: str,
    nodes: Sequence[str],
    gpus: Mapping[str, int],
    systems: Mapping[str, System | None],
    groups: Sequence[NodeGroupPlan],
    members: Mapping[str, Sequence[str]],
) -> Domain:
    """A domain the blueprint lists, of the system of its first node's group."""
    group = next((g for g in groups if nodes[0] in members[g.name]), None)
    s: System | None = systems.get(group.name) if group else None
    return Domain(
        name,
        tuple(nodes),
        sum(gpus.get(n, 0) for n in nodes),
        s.key if s else None,
        s.domain_nodes if s else 1,
    )


def _trays(
    group: str,
    nodes: list[str],
    racks: Mapping[str, str | None],
    s: System,
    gpus: Mapping[str, int],
) -> list[Domain]:
    """A rack-scale group's nodes as domains: rack by rack, each at most a full domain."""
    by_rack: dict[str | None, list[str]] = {}
    for n in nodes:
        by_rack.setdefault(racks.get(n), []).append(n)
    out = []
    for rack, members in by_rack.items():
        for k in range(0, len(members), s.domain_nodes):
            part = tuple(members[k : k + s.domain_nodes])
            name = f"nvl-{rack or group}" + (
                f"-{k // s.domain_nodes}" if k or len(members) > s.domain_nodes else ""
            )
            out.append(Domain(name, part, sum(gpus[n] for n in part), s.key, s.domain_nodes))
    return out
