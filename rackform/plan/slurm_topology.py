"""Slurm's topology from the plan's: one pure function writes topology.conf, and one says where
a job of some of the nodes is placed within it.

Slurm 23.11 and 24.11 load one topology plugin (slurm.conf's TopologyPlugin): topology/block
(`BlockName=... Nodes=...` and `BlockSizes=`, jobs kept in a block with `--segment`) or
topology/tree (`SwitchName=... Nodes=` / `Switches=`, jobs kept under few switches with
`--switches`). Both at once needs Slurm 25.05's topology.yaml. So, in topology.conf, one wins:

- block, where an NVLink domain spans nodes (an NVL72's 18 trays): a job that leaves its domain
  loses NVLink, which costs far more than crossing a spine; the fabric's switches are then not
  given to Slurm;
- tree otherwise (HGX nodes, each its own domain): the leaves and spines of the fabric, or one
  leaf per rack under a root where the blueprint declares no switches (the file every cluster
  had before topology was declared, byte for byte).

Slurm 25.05 and later read topology.yaml first and ignore topology.conf where it exists
(topology.yaml(5), Slurm 26.05, read 2026-12-05 from forky's slurm-client and
https://slurm.schedmd.com/topology.yaml.html): several named topologies, the first with
`cluster_default: true` for partitions that name none, a partition naming another with slurm.conf's
`Topology=` (slurm.conf(5), PARTITION CONFIGURATION). Where both matter, an NVLink domain
spanning nodes and a fabric of switches (declared, or a cloud's), `topology_yaml` writes both:
the block topology (`NVLINK`), the cluster default for the reason block wins above, and the
fabric's tree (`FABRIC`) for a partition that asks for it. The slurm role writes it only where
the node's Slurm is 25.05 or later; topology.conf stays what older ones read, so both files come
from the same domains and switches here.

On AWS the same function writes it from what EC2 says after `up` (rackform.targets.aws.topology:
each UltraServer capacity block a domain, the network nodes the tree), so topology.conf has one
writer whatever the target.
"""

from __future__ import annotations

from collections.abc import Sequence

import yaml

from rackform.plan.fabric import TopologyPlan
from rackform.plan.slurm import SlurmTopology, Switch

BLOCK = "topology/block"
TREE = "topology/tree"
NONE = "topology/none"
# topology.yaml's topologies: the NVLink domains' blocks (the cluster default) and the fabric's tree.
NVLINK = "nvlink"
FABRIC = "fabric"
# The first Slurm that reads topology.yaml (Slurm 25.05's release notes; topology.yaml(5)).
TOPOLOGY_YAML_SINCE = (25, 5)

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


def _block_sizes(topology: TopologyPlan) -> list[int]:
    """BlockSizes: the smallest domain's nodes (the planning base: Slurm wants every block to
    have at least that many), then each power-of-two multiple that as many blocks can make
    (18,36,72 for four NVL72 racks)."""
    base = min(len(d.nodes) for d in topology.domains)
    sizes = [base]
    while sizes[-1] * 2 <= base * len(topology.domains):
        sizes.append(sizes[-1] * 2)
    return sizes


def _blocks(topology: TopologyPlan) -> str:
    """One block per NVLink domain, then BlockSizes (`_block_sizes`)."""
    domains = topology.domains
    sizes = _block_sizes(topology)
    head = (
        "# One block per NVLink domain (topology/block): Slurm keeps a job, or each --segment of\n"
        "# it, inside one domain. The fabric's switches are not described (one plugin at a time).\n"
    )
    lines = [f"BlockName={d.name} Nodes={','.join(d.nodes)}\n" for d in domains]
    return head + "".join(lines) + "BlockSizes=" + ",".join(map(str, sizes)) + "\n"


def both_matter(topology: TopologyPlan) -> bool:
    """An NVLink domain spans nodes and the fabric has switches of its own (declared in the
    blueprint, or a cloud's): topology.conf keeps only the blocks, topology.yaml can hold both.
    The racks' leaves alone (no switch declared) add nothing to an NVL72's blocks: a rack is its
    domain."""
    return (
        topology.spans_nodes
        and bool(topology.switches)
        and bool(topology.switches_declared or topology.source)
    )


def topology_yaml(topology: TopologyPlan) -> str:
    """topology.yaml (Slurm 25.05 and later) for a plan where both matter (`both_matter`), else
    "" (topology.conf says all there is): the NVLink domains as a block topology, `NVLINK`, the
    cluster default, since a job that leaves its domain loses NVLink (the reason block wins in
    topology.conf, and what the plan's placement, `--segment`, is for); the fabric's switches as
    a tree topology, `FABRIC`, for a partition that names it (slurm.conf's `Topology=`). Written
    with a YAML library from the same domains and switches as topology.conf; their names are the
    blueprint's, validated there (rackform.blueprint.schema.names)."""
    if not both_matter(topology):
        return ""
    block = {
        "block_sizes": _block_sizes(topology),
        "blocks": [{"block": d.name, "nodes": ",".join(d.nodes)} for d in topology.domains],
    }
    switches = []
    for s in topology.switches:
        entry: dict[str, str] = {"switch": s.name}
        if s.switches:
            entry["children"] = ",".join(s.switches)
        if s.nodes:
            entry["nodes"] = ",".join(s.nodes)
        switches.append(entry)
    doc = [
        {"topology": NVLINK, "cluster_default": True, "block": block},
        {"topology": FABRIC, "cluster_default": False, "tree": {"switches": switches}},
    ]
    origin = topology.source or "the blueprint"
    head = (
        "# Slurm 25.05+: the NVLink domains as blocks (the cluster default: jobs stay in a domain)\n"
        f"# and the fabric's switches as {origin} gives them, for partitions with Topology={FABRIC}.\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100)


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
