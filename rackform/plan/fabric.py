"""The cluster's topology as the plan carries it (`Plan.topology`): every GPU node's NVLink
domain and the scale-out fabric's switches, frozen values compiled by `rackform.plan.topology`.
Apart from the compiler so that the plan's model can name them without importing it."""

from __future__ import annotations

from dataclasses import dataclass

from rackform.plan.slurm import Switch


@dataclass(frozen=True)
class Domain:
    """Nodes whose GPUs share one NVLink fabric: a node's own GPUs (an HGX board), or the
    compute trays of one rack-scale domain (an NVL72)."""

    name: str
    nodes: tuple[str, ...]
    gpus: int  # the GPUs of its nodes
    system: str | None  # the catalog system it is built of, if known
    capacity_nodes: int  # the most nodes a domain of its system joins (1: a node's own)

    @property
    def spans_nodes(self) -> bool:
        return len(self.nodes) > 1


@dataclass(frozen=True)
class TopologyPlan:
    domains: tuple[Domain, ...]  # every GPU node in exactly one
    switches: tuple[Switch, ...]  # the fabric: leaves with nodes, switches above them
    # The blueprint says more than "one leaf per rack": a `topology` section, or a rack-scale
    # system whose domains span nodes. False: Slurm's configuration stays as it always was.
    declared: bool
    # The fabric's declared switches (topology.switches); False: one leaf per rack under a root.
    switches_declared: bool = False
    # Where the switches come from when it is neither the blueprint nor its racks (a cloud's
    # placement: "EC2 DescribeInstanceTopology"); said in topology.conf's header.
    source: str = ""

    @property
    def spans_nodes(self) -> bool:
        """Some NVLink domain joins several nodes (Slurm's topology/block describes it)."""
        return any(d.spans_nodes for d in self.domains)

    @property
    def domain_gpus(self) -> int:
        """The GPUs of the smallest domain: what a tensor x expert group must fit in."""
        return min((d.gpus for d in self.domains), default=0)

    @property
    def domain_nodes(self) -> int:
        """The nodes of the smallest domain (1 where every node is its own)."""
        return min((len(d.nodes) for d in self.domains), default=1)

    def domain_of(self, node: str) -> Domain | None:
        return next((d for d in self.domains if node in d.nodes), None)
