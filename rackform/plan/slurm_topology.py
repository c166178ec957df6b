"""Slurm's topology from the plan's: one pure function writes topology.conf, and one says where
a job of some of the nodes is placed within it.

Slurm 23.11 and 24.11 load one topology plugin (slurm.conf's TopologyPlugin): topology/block
(`BlockName=... Nodes=...` and `BlockSizes=`, jobs kept in a block with `--segment`) or
topology/tree (`SwitchName=... Nodes=` / `Switches=`, jobs kept under few switches with
`--switches`). Both at once needs Slurm 25.05's topology.yaml, which rackform does not write.
So one wins:

- block, where an NVLink domain spans nodes (an NVL72's 18 trays): a job that leaves its domain
  loses NVLink, which costs far more than crossing a spine; the fabric's switches are then not
  given to Slurm;
- tree otherwise (HGX nodes, each its own domain): the leaves and spines of the fabric, or one
  leaf per rack under a root where the blueprint declares no switches (the file every cluster
  had before topology was declared, byte for byte).

On AWS the same function writes it from what EC2 says after `up` (rackform.targets.aws.topology:
each UltraServer capacity block a domain, the network nodes the tree), so topology.conf has one
writer whatever the target.
"""

from __future__ import annotations

from collections.abc import Sequence

from rackform.plan.fabric import TopologyPlan
from rackform.plan.slurm import SlurmTopology, Switch

BLOCK = "topology/block"
TREE = "topology/tree"
NONE = "topology/none"

# The tree's header, as the role's template has always written it above the racks' leaves.
RACKS_HEADER = "# One leaf switch per rack of the blueprint (hosts in no rack share one) and a root above them.\n"


def topology_conf(topology: TopologyPlan) -> SlurmTopology:
    """topology.conf for the plan's topology: blocks where NVLink domains span nodes, else
    the fabric's tree; no switch and no spanning domain: no topology (topology/none)."""
    if topology.spans_nodes:
        return SlurmTopology(BLOCK, _blocks(topology))
    if not topology.switches:
        return SlurmTopology(NONE, "")
    if topology.source:
        head = f"# The fabric's switches as {topology.source} gives them (leaves with their nodes, the layers above).\n"
    elif topology.switches_declared:
        head = "# The fabric's switches as the blueprint declares them (leaves with their nodes, spines above).\n"
    else:
        head = RACKS_HEADER
    return SlurmTopology(TREE, head + "".join(_switch_line(s) for s in topology.switches))


def _switch_line(s: Switch) -> str:
    line = f"SwitchName={s.name}"
    if s.nodes:
        line += " Nodes=" + ",".join(s.nodes)
    if s.switches:
        line += " Switches=" + ",".join(s.switches)
    return line + "\n"


def _blocks(topology: TopologyPlan) -> str:
    """One block per NVLink domain; BlockSizes: the smallest domain's nodes (the planning base:
    Slurm wants every block to have at least that many), then each power-of-two multiple that
    as many blocks can make (18,36,72 for four NVL72 racks)."""
    domains = topology.domains
    base = min(len(d.nodes) for d in domains)
    sizes = [base]
    while sizes[-1] * 2 <= base * len(domains):
        sizes.append(sizes[-1] * 2)
    head = (
        "# One block per NVLink domain (topology/block): Slurm keeps a job, or each --segment of\n"
        "# it, inside one domain. The fabric's switches are not described (one plugin at a time).\n"
    )
    lines = [f"BlockName={d.name} Nodes={','.join(d.nodes)}\n" for d in domains]
    return head + "".join(lines) + "BlockSizes=" + ",".join(map(str, sizes)) + "\n"


def placement(topology: TopologyPlan, nodes: Sequence[str]) -> tuple[str, ...]:
    """sbatch's options that keep a job of `nodes` within one NVLink domain, or under one leaf,
    where it fits: block: `--segment=N` (N: the job's nodes in each domain it uses, where that
    is the same in each: the whole job where it is in one domain); tree: `--switches=1` where one leaf has
    every node. None where it does not fit (preflight names a job that is no multiple of a
    domain), and none where the blueprint declares no topology (its jobs run as before)."""
    if not topology.declared or not nodes:
        return ()
    plugin = topology_conf(topology).plugin
    if plugin == BLOCK:
        # The job's nodes per domain: one segment per domain where each holds as many.
        per: dict[str, int] = {}
        for n in nodes:
            d = topology.domain_of(n)
            if d is None:
                return ()
            per[d.name] = per.get(d.name, 0) + 1
        counts = set(per.values())
        return (f"--segment={counts.pop()}",) if len(counts) == 1 else ()
    if plugin == TREE:
        wanted = set(nodes)
        if any(wanted <= set(s.nodes) for s in topology.switches):
            return ("--switches=1",)
    return ()
