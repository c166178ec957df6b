"""The cluster's topology, declared once for any target: its NVLink domains (by default each
node's own GPUs, or the trays of a rack-scale system such as an NVL72, taken in order) and the
scale-out fabric's switches (leaves with their nodes, spines above them; a rail-optimized
fabric's scalable units as leaves). Slurm's topology.conf, placement and preflight read the
compiled form (`rackform.plan.topology`); the rules here refuse what cannot be built, each at
its field."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from rackform.blueprint.schema.base import Strict, Violation, closest, repeated
from rackform.blueprint.schema.names import NodeName, SwitchName
from rackform.catalog.systems import System, load_systems, system_of_gpu


class NvlinkDomain(Strict):
    """Nodes whose GPUs share one NVLink fabric (an NVL72 rack's compute trays)."""

    name: Annotated[SwitchName, Field(description="Domain name (topology.conf's BlockName).")]
    nodes: Annotated[
        tuple[NodeName, ...],
        Field(
            description="Its nodes (compute trays), at most the system's trays per domain (18 on an NVL72), all in one rack.",
            min_length=1,
        ),
    ]


class FabricSwitch(Strict):
    """A switch of the scale-out fabric: a leaf with its nodes, or a spine above leaves."""

    name: Annotated[SwitchName, Field(description="Switch name (topology.conf's SwitchName).")]
    nodes: Annotated[
        tuple[NodeName, ...],
        Field(
            description="Nodes cabled to this leaf (a rail-optimized fabric: the nodes of one scalable unit, whose rails share the same rail switches)."
        ),
    ] = ()
    switches: Annotated[
        tuple[SwitchName, ...], Field(description="Switches below this one (a spine's leaves).")
    ] = ()


class TopologySpec(Strict):
    nvlink_domains: Annotated[
        tuple[NvlinkDomain, ...],
        Field(
            description="NVLink domains that span nodes. Default: a node's own GPUs are its domain, and the nodes of a group whose system is rack-scale (node_groups[].system, e.g. GB200-NVL72) form domains of the system's trays, rack by rack, in the order listed. Bare metal and colocation only: an AWS UltraServer's domain comes from its system."
        ),
    ] = ()
    switches: Annotated[
        tuple[FabricSwitch, ...],
        Field(
            description="The scale-out fabric: leaf switches with their nodes and spines with their leaves; empty: one leaf per rack under a root (hosts in no rack share one). Bare metal and colocation only: on AWS the tree comes from the placement."
        ),
    ] = ()


def group_system(group: Any) -> System | None:
    """A node group's system: the one it names, else the only one its GPU model is sold in."""
    if getattr(group, "system", None):
        return load_systems().get(group.system)
    return system_of_gpu(getattr(group, "gpu", None))


def system_rules(groups: Sequence[Any]) -> list[Violation]:
    """A group's system exists and matches its GPU model and GPUs per node."""
    out: list[Violation] = []
    systems = load_systems()
    for i, g in enumerate(groups):
        at = ("node_groups", i, "system")
        if not g.system:
            continue
        s = systems.get(g.system)
        if s is None:
            out.append(
                Violation(at, f"unknown system {g.system!r}", closest(g.system, list(systems)))
            )
            continue
        if g.gpu is not None and g.gpu != s.gpu:
            out.append(
                Violation(at, f"system {s.key} carries {s.gpu}, not {g.gpu}", f"set gpu: {s.gpu}")
            )
        if g.gpus_per_node and g.gpus_per_node != s.node_gpus:
            out.append(
                Violation(
                    ("node_groups", i, "gpus_per_node"),
                    f"a {s.key} node has {s.node_gpus} GPUs, not {g.gpus_per_node}",
                    f"set gpus_per_node: {s.node_gpus}",
                )
            )
    return out


def topology_rules(bp: Any, unnamed_nodes: str | None = None) -> list[Violation]:
    """What cannot be built: a name that is no node or switch, a node in two domains or on two
    leaves, a domain larger than its system allows or spread over two racks. `unnamed_nodes`:
    why the target's blueprint cannot name its nodes (its stack names them), if it cannot."""
    out = system_rules(bp.node_groups)
    t = bp.topology
    if t is None:
        return out
    hosts = {h.name: (g, h) for g in bp.node_groups for h in getattr(g, "hosts", ())}
    if unnamed_nodes:
        why = unnamed_nodes
        if t.nvlink_domains:
            out.append(
                Violation(
                    ("topology", "nvlink_domains"),
                    f"{why}: an UltraServer's domain comes from its system",
                    "remove nvlink_domains; set node_groups[].system",
                )
            )
        if t.switches:
            out.append(
                Violation(
                    ("topology", "switches"),
                    f"{why}: the tree comes from the instances' placement",
                    "remove switches",
                )
            )
        return out
    out += _domain_rules(t.nvlink_domains, hosts)
    out += _switch_rules(t.switches, hosts)
    if t.switches:
        leaves = {n for s in t.switches for n in s.nodes}
        out += [
            Violation(
                ("topology", "switches"),
                f"node {n!r} is on no leaf switch",
                f"add {n} to a leaf's nodes",
            )
            for n in hosts
            if n not in leaves
        ]
    return out


def _domain_rules(domains: Sequence[NvlinkDomain], hosts: dict) -> list[Violation]:
    out = [
        Violation(
            ("topology", "nvlink_domains", i, "name"),
            f"domain {domains[i].name!r} is declared twice",
            "rename one",
        )
        for i in repeated(d.name for d in domains)
    ]
    seen: dict[str, str] = {}
    for i, d in enumerate(domains):
        at = ("topology", "nvlink_domains", i)
        systems, racks = set(), {}
        for j, n in enumerate(d.nodes):
            if n not in hosts:
                out.append(
                    Violation(
                        (*at, "nodes", j),
                        f"{n!r} is no node of this blueprint",
                        closest(n, list(hosts)),
                    )
                )
                continue
            if n in seen:
                out.append(
                    Violation(
                        (*at, "nodes", j),
                        f"node {n!r} is in domain {seen[n]!r} already",
                        "a node's GPUs are in one NVLink domain: list it once",
                    )
                )
                continue
            seen[n] = d.name
            g, h = hosts[n]
            s = group_system(g)
            systems.add(s.key if s else None)
            racks.setdefault(h.rack, n)
        if len(systems) > 1:
            out.append(
                Violation(
                    (*at, "nodes"),
                    f"domain {d.name!r} mixes nodes of different systems",
                    "one domain is one system's trays",
                )
            )
            continue
        key = next(iter(systems), None)
        s = load_systems().get(key) if key else None
        most = s.domain_nodes if s else 1
        if len(d.nodes) > most:
            what = (
                f"a {s.key} domain joins at most {most} nodes"
                if s
                else "a node's NVLink domain is its own GPUs (its group names no rack-scale system)"
            )
            out.append(
                Violation(
                    (*at, "nodes"),
                    f"domain {d.name!r} has {len(d.nodes)} nodes: {what}",
                    f"split it into domains of at most {most}"
                    if most > 1
                    else "set node_groups[].system to a rack-scale system, or remove the domain",
                )
            )
        if len(racks) > 1:
            where = ", ".join(f"{n} in {r or 'no rack'}" for r, n in racks.items())
            out.append(
                Violation(
                    (*at, "nodes"),
                    f"the trays of domain {d.name!r} are in {len(racks)} racks ({where})",
                    "an NVLink domain is cabled inside one rack: fix the hosts' rack or the domain",
                )
            )
    return out


def _switch_rules(switches: Sequence[FabricSwitch], hosts: dict) -> list[Violation]:
    names = [s.name for s in switches]
    out = [
        Violation(
            ("topology", "switches", i, "name"),
            f"switch {names[i]!r} is declared twice",
            "rename one",
        )
        for i in repeated(names)
    ]
    leaf_of: dict[str, str] = {}
    for i, s in enumerate(switches):
        at = ("topology", "switches", i)
        if not s.nodes and not s.switches:
            out.append(
                Violation(
                    (*at, "nodes"),
                    f"switch {s.name!r} has no nodes and no switches",
                    "add nodes (a leaf) or switches (a spine)",
                )
            )
        for j, n in enumerate(s.nodes):
            if n not in hosts:
                out.append(
                    Violation(
                        (*at, "nodes", j),
                        f"{n!r} is no node of this blueprint",
                        closest(n, list(hosts)),
                    )
                )
            elif n in leaf_of:
                out.append(
                    Violation(
                        (*at, "nodes", j),
                        f"node {n!r} is on leaf {leaf_of[n]!r} already",
                        "list each node under one leaf",
                    )
                )
            else:
                leaf_of[n] = s.name
        for j, c in enumerate(s.switches):
            if c not in names or c == s.name:
                out.append(
                    Violation(
                        (*at, "switches", j),
                        f"{c!r} is no other switch of topology.switches",
                        closest(c, [x for x in names if x != s.name]),
                    )
                )
    return out
