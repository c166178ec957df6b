"""Slurm's tree from the placement AWS gave a cluster's instances: EC2's DescribeInstanceTopology,
read after the instances exist, never in the offline plan.

EC2 answers, per running instance of a supported type, its network nodes: three (or, for some
types, four) layers of the network above the instance, listed from the top of the hierarchy to
the bottom, the last one the node the instance hangs from; an UltraServer's instances also carry
the capacity block they were bought in, which is their NVLink domain (EC2 user guide, "How EC2
instance topology works", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/how-ec2-instance-topology-works.html;
API reference, DescribeInstanceTopology, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceTopology.html:
at most 100 instance ids a request, NextToken pages the answer, MaxResults may not be given with
instance ids, NetworkNodes is empty for an unsupported type or an instance that is not running,
and CapacityBlockId may be empty right after launch, EC2 being eventually consistent).

Two parts: `read` asks EC2 (a boto3 client: moto serves no DescribeInstanceTopology, so its
tests give botocore's Stubber responses in the documented shape) and checks every value it will
write into topology.conf (`names.switch_name`); `slurm_topology` turns the placement into the
Slurm role's variables, the one function an integrator routes through the shared topology
renderer (`rackform.plan.slurm_topology.topology_conf`, also the plan's). The plain shape
between them is `Placed`: (node name, network nodes top to bottom,
capacity block or None).

Where it enters: `InstanceTopology`, a dynamic resource of the stack that depends on the
instances, reads EC2 when it is created and whenever the cluster's instances change (their
names or ids: a replaced node is a new instance, placed anew), and a refresh (`rackform drift`,
`up --refresh`) reads it again through the provider's `read`, so a placement that moved shows as
a difference. Its `slurm_topology_conf` and `slurm_topology_plugin` (with `slurm_switches`, which
the role's preflight checks against its nodes) are role variables only the stack knows, merged
over the plan's before Configure runs; the offline plan shows them as known after up."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from rackform.blueprint.schema import names
from rackform.plan.fabric import Domain, TopologyPlan
from rackform.plan.slurm import Switch
from rackform.plan.slurm_topology import topology_conf, topology_yaml

# DescribeInstanceTopology's limit on explicitly named instances per request.
IDS_PER_REQUEST = 100
# The switch that holds the tree's tops together where EC2 gives more than one (Slurm packs a
# job only within one connected tree), and the leaf of the nodes EC2 gave no place.
ROOT = "aws-root"
UNPLACED = "aws-unplaced"
SOURCE = "EC2 DescribeInstanceTopology"


@dataclass(frozen=True)
class Placed:
    node: str  # the node's name, as the plan and Slurm call it
    network_nodes: tuple[str, ...]  # top of the hierarchy first; empty: EC2 gave none
    capacity_block: str | None = None  # an UltraServer's capacity block: its NVLink domain


def read(client: Any, nodes: Mapping[str, str]) -> tuple[Placed, ...]:
    """The placement of `nodes` (node name -> instance id), in the nodes' order; a node EC2 did
    not answer for comes back with no network nodes. `client`: boto3's EC2 client."""
    by_id = {names.instance_id(i, f"the stack's node {n!r}"): n for n, i in nodes.items()}
    ids = list(by_id)
    found: dict[str, Placed] = {}
    paginator = client.get_paginator("describe_instance_topology")
    for start in range(0, len(ids), IDS_PER_REQUEST):
        for page in paginator.paginate(InstanceIds=ids[start : start + IDS_PER_REQUEST]):
            for inst in page.get("Instances", []):
                node = by_id.get(inst.get("InstanceId"))
                if node is None:
                    continue  # not one we asked about
                where = f"{SOURCE} (instance {inst['InstanceId']})"
                layers = tuple(names.switch_name(n, where) for n in inst.get("NetworkNodes") or ())
                block = inst.get("CapacityBlockId") or None
                found[node] = Placed(
                    node, layers, None if block is None else names.switch_name(block, where)
                )
    return tuple(found.get(n, Placed(n, ())) for n in nodes)


def slurm_topology(placed: Sequence[Placed]) -> dict[str, Any]:
    """The Slurm role's topology variables from the placement: `slurm_topology_conf` and
    `slurm_topology_plugin`, topology.conf as the one renderer writes it (`topology_plan`:
    topology/block where an UltraServer capacity block joins several nodes, else
    topology/tree), and what it is written from: `slurm_switches`, the tree (each
    network node a switch, a node under the last of its layers; a switch with both nodes and
    switches below keeps its nodes on a leaf of their own, `<switch>-direct`, since a
    topology.conf switch lists one or the other; nodes EC2 gave no place share the leaf
    `aws-unplaced`; several tops meet under `aws-root`), and `slurm_blocks`, each UltraServer
    capacity block with its nodes (topology/block's BlockName=)."""
    children: dict[str, dict[str, None]] = {}  # switch -> child switches, in order
    members: dict[str, list[str]] = {}  # switch -> nodes directly below it
    tops: dict[str, None] = {}
    blocks: dict[str, list[str]] = {}
    for p in placed:
        if p.capacity_block:
            blocks.setdefault(p.capacity_block, []).append(p.node)
        if not p.network_nodes:
            members.setdefault(UNPLACED, []).append(p.node)
            tops[UNPLACED] = None
            continue
        tops[p.network_nodes[0]] = None
        for upper, lower in zip(p.network_nodes, p.network_nodes[1:], strict=False):
            children.setdefault(upper, {})[lower] = None
        members.setdefault(p.network_nodes[-1], []).append(p.node)
    switches: list[Switch] = []
    for name in _walk(tops, children):
        below, nodes = tuple(children.get(name, ())), tuple(members.get(name, ()))
        if below and nodes:
            direct = f"{name}-direct"
            switches.append(Switch(direct, nodes=nodes))
            below, nodes = (*below, direct), ()
        switches.append(Switch(name, nodes=nodes, switches=below))
    if len(tops) > 1:
        switches.append(Switch(ROOT, switches=tuple(tops)))
    plan = topology_plan(switches, blocks, [p.node for p in placed])
    conf = topology_conf(plan)
    return {
        "slurm_switches": [
            {"name": s.name, "nodes": list(s.nodes), "switches": list(s.switches)} for s in switches
        ],
        "slurm_blocks": [{"name": b, "nodes": n} for b, n in blocks.items()],
        "slurm_topology_plugin": conf.plugin,
        "slurm_topology_conf": conf.text,
        # Slurm 25.05+: the blocks and this tree at once, where both matter ("" otherwise).
        "slurm_topology_yaml": topology_yaml(plan),
    }


def topology_plan(
    switches: Sequence[Switch], blocks: Mapping[str, Sequence[str]], nodes: Sequence[str]
) -> TopologyPlan:
    """The placement in the plan's shape, for the one writer of topology.conf
    (`slurm_topology.topology_conf`): each capacity block a domain of its nodes and every
    other node a domain of its own (so block wins where an UltraServer block joins several
    nodes, as the plan's rule says, and tree otherwise), the switches EC2's network nodes."""
    in_block = {n for b in blocks.values() for n in b}
    # A domain's GPUs and system are not in EC2's answer; topology.conf needs only its nodes.
    domains = [Domain(b, tuple(ns), 0, None, len(ns)) for b, ns in blocks.items()]
    domains += [Domain(n, (n,), 0, None, 1) for n in nodes if n not in in_block]
    return TopologyPlan(
        tuple(domains), tuple(switches), declared=True, switches_declared=True, source=SOURCE
    )


def _walk(tops: Iterable[str], children: Mapping[str, Mapping[str, None]]) -> list[str]:
    """Every switch, the lower ones first (topology.conf names a switch before its parent)."""
    out: list[str] = []

    def visit(name: str) -> None:
        for child in children.get(name, ()):
            visit(child)
        out.append(name)

    for top in tops:
        visit(top)
    return out


def read_topology(
    region: str, nodes: Mapping[str, str], client: Callable[[str, str], Any] | None = None
) -> dict[str, Any]:
    """`slurm_topology` of what EC2 answers for `nodes` in `region` (`client(service, region)`:
    boto3's, from the deploy extra, unless given)."""
    if client is None:
        from rackform.targets.aws.api import boto3_client as client
    return slurm_topology(read(client("ec2", region), nodes))


# What the resource computes (declared as None inputs: unknown in the offline plan).
OUTPUTS = (
    "slurm_switches",
    "slurm_blocks",
    "slurm_topology_plugin",
    "slurm_topology_conf",
    "slurm_topology_yaml",
)
# Those the Slurm role takes (over the plan's) before Configure runs.
TOPOLOGY_VARS = (
    "slurm_switches",
    "slurm_topology_plugin",
    "slurm_topology_conf",
    "slurm_topology_yaml",
)


class InstanceTopologyProvider(ResourceProvider):
    serialize_as_secret_always = False

    def _read(self, props: dict[str, Any]) -> dict[str, Any]:
        from rackform.targets.aws.api import aws_errors, one_line

        try:
            got = read_topology(props["region"], props["nodes"])
        except aws_errors() as exc:
            raise RuntimeError(
                f"cannot read the instances' placement ({SOURCE}; the deploying role needs "
                f"ec2:DescribeInstanceTopology): {one_line(exc)}"
            ) from None
        return {"region": props["region"], "nodes": props["nodes"], **got}

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"topology-{props['region']}", self._read(props))

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [k for k in ("region", "nodes") if olds.get(k) != news.get(k)]
        # A state an earlier release wrote lacks what this one computes: read it again.
        changed += [k for k in OUTPUTS if k not in olds]
        return DiffResult(changes=bool(changed), replaces=[], stables=[])

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(self._read(news))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_, self._read(props))


class InstanceTopology(pulumi.dynamic.Resource, module="rackform", name="InstanceTopology"):
    slurm_switches: pulumi.Output[list]
    slurm_blocks: pulumi.Output[list]
    slurm_topology_plugin: pulumi.Output[str]
    slurm_topology_conf: pulumi.Output[str]
    slurm_topology_yaml: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        region: str,
        nodes: pulumi.Input[Mapping[str, str]],
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`nodes`: node name -> instance id, every training node of the cluster."""
        props = {"region": region, "nodes": nodes, **dict.fromkeys(OUTPUTS)}
        super().__init__(InstanceTopologyProvider(), name, props, opts)
