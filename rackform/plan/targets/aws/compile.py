"""The AWS target's part of compile: each node group's instance facts from the catalog, the
VPC cut into the nodes' and the NAT gateway's subnets, the placement group and the machine
image, its price, how Ansible reaches the nodes, and what is known of its stack before it runs
(the provider's region, its resources' replacement rules and offline answers, the data tier's
pieces)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from rackform.blueprint.schema.model import Blueprint, NodeGroup
from rackform.blueprint.schema.scheduler import CONTROLLER_TYPE
from rackform.blueprint.targets.aws.catalog import load_aws_catalog
from rackform.blueprint.targets.aws.groups import RESERVED_MARKETS
from rackform.blueprint.targets.aws.images import IMAGES, Image
from rackform.blueprint.targets.aws.names import controller_name, node_names
from rackform.catalog import Catalog
from rackform.plan.arrays import array_plan
from rackform.plan.model import Basis, NodeGroupPlan, Offer
from rackform.plan.pricing import TargetCost
from rackform.plan.slurm import ControllerInstance
from rackform.plan.targets.aws import ansible, cost, data_layout, replacement, replaces
from rackform.plan.targets.aws.offline import ANSWERS
from rackform.plan.targets.compile import TargetCompiler

# Markets whose capacity already has a place (RESERVED_MARKETS): a capacity block or an
# On-Demand Capacity Reservation was bought in a given spot of a zone, and launching it into a
# placement group that rackform just created (and the reservation therefore is not in) is
# refused by EC2.


def group_market(bp: Blueprint, group: NodeGroup) -> tuple[str, str | None]:
    """(market, reservation id) of a node group: its own where it names a market, else the
    target's."""
    if group.market is not None:
        return group.market, group.reservation_id
    return bp.target.market, bp.target.reservation_id


@dataclass(frozen=True)
class AwsPlan:
    nodes_cidr: str  # the VPC's first half: the private subnet of the nodes
    public_cidr: str  # a small block at the VPC's end: the NAT gateway's public subnet
    partition: str  # arn partition of the region
    placement_group: bool  # training nodes share a cluster placement group the stack creates
    existing_placement_group: str | None  # ... or one that exists already, by name
    image: Image  # the machine image's kind: filter, user, what it preinstalled
    rollout: str  # delete-first | create-first: how a node whose template changes is replaced
    rollout_why: str  # the reason, in words (capacity bound, or the blueprint's choice)
    # The CPU architectures the node groups run (their instance types'): one image each.
    arches: tuple[str, ...] = ("x86_64",)


def partition(region: str) -> str:
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    if region.startswith("cn-"):
        return "aws-cn"
    return "aws"


def split_vpc(vpc_cidr: str) -> tuple[str, str]:
    """(nodes subnet, public subnet): the nodes get the first half of the VPC, the NAT gateway's
    public subnet a small block at its end (a /28 at least, AWS's smallest subnet). The schema
    has already refused a VPC too small for both."""
    net = ipaddress.ip_network(vpc_cidr)
    nodes = next(net.subnets(new_prefix=net.prefixlen + 1))
    public = list(net.subnets(new_prefix=min(net.prefixlen + 4, 28)))[-1]
    return str(nodes), str(public)


def capacity_bound(bp: Blueprint) -> str:
    """Why a replacement may not count on more capacity than the cluster holds ("" when it
    may): a cluster placement group packs instances close together and AWS advises launching
    them together, since later launches into it meet insufficient-capacity errors more often
    (EC2 user guide, "Placement groups": cluster placement group rules); a capacity
    reservation or capacity block holds exactly what was bought."""
    t = bp.target
    if t.market in RESERVED_MARKETS:
        return f"{t.market} {t.reservation_id} holds only the cluster's own instances"
    for g in bp.node_groups:
        market, reservation = group_market(bp, g)
        if market in RESERVED_MARKETS:
            return f"{g.name}'s {market} {reservation} holds only its own instances"
    if bp.purpose == "training":
        return "training nodes share a cluster placement group"
    return ""


def rollout(bp: Blueprint) -> tuple[str, str]:
    """(delete-first | create-first, why): the blueprint's choice, else delete-first where
    capacity is bound."""
    chosen = bp.target.rollout.strategy
    if chosen is not None:
        return chosen, "target.rollout.strategy says so"
    bound = capacity_bound(bp)
    if bound:
        return "delete-first", bound
    return "create-first", "capacity is not bound: replacements launch before the old nodes go"


class AwsCompiler(TargetCompiler):
    type = "aws"
    nodes_listed = False
    owned = False
    reads_siblings = True  # the default quotas are the account's, over every stack
    label = "AWS"
    node_types = ("aws:ec2/instance:Instance", "aws:autoscaling/group:Group")
    init_notes = (
        "Pulumi's AWS provider takes credentials as any AWS tool does (`AWS_PROFILE`, or "
        "`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`); the region is the blueprint's."
    )
    after_up = (
        "On AWS the roles run inside `up` (the nodes come from the stack), not through "
        "`rackform configure`."
    )

    def on_demand(self, target) -> bool:
        return target.market == "on-demand"

    def offers(self, catalog, groups):
        """Every GPU instance type of the AWS catalog."""
        return tuple(
            Offer(f"{it.gpu_count} x {it.gpu}, {it.key}", it.gpu, it.gpu_count)
            for it in load_aws_catalog().instances.values()
        )

    def compile_group(self, bp: Blueprint, group: NodeGroup, catalog: Catalog) -> NodeGroupPlan:
        it = load_aws_catalog().instance(group.instance_type)
        market, reservation = group_market(bp, group)
        # Launch templates attach every EFA interface the type has, and only with an EFA fabric.
        efa = int(it.efa_interfaces.value) if bp.network.fabric == "efa" else 0
        array = array_plan(
            bp.storage.checkpoint,
            drives=int(it.nvme_drives.value),
            drive_gb=it.nvme_drive_gb.value,
            per_drive=it.nvme_write_gbps_per_drive,
            where=f"{it.key} instance store",
        )
        return NodeGroupPlan(
            name=group.name,
            count=group.count,
            gpu=catalog.gpu(it.gpu),
            gpus_per_node=it.gpu_count,
            instance=it,
            hosts=(),
            min_count=group.min_count,
            max_count=group.max_count,
            efa_interfaces=efa,
            array=array,
            # Inference groups scale on their own: their nodes configure themselves at boot.
            configured="boot" if bp.purpose == "inference" else "push",
            market=market,
            reservation_id=reservation if market in RESERVED_MARKETS else None,
        )

    def node_names(self, stack: str, group: NodeGroupPlan) -> tuple[str, ...]:
        """One instance per training node, named as the stack names it."""
        return node_names(stack, group.name, group.count)

    def slurm_controller(self, bp: Blueprint, stack: str) -> ControllerInstance | None:
        """A small instance of its own: the nodes are the stack's, so none of them exists to be
        named the controller before `up`."""
        if bp.scheduler is None:
            return None
        return ControllerInstance(
            controller_name(stack), bp.scheduler.controller_instance_type or CONTROLLER_TYPE
        )

    def compile_target(self, bp, groups, catalog):
        t = bp.target
        nodes, public = split_vpc(t.vpc_cidr)
        # Reserved capacity sits where it was bought: it may name the placement group it was
        # reserved in, but rackform never creates one around it; groups of the cluster that
        # buy theirs by the hour share one the stack creates.
        unbound = [g for g in groups if not g.reserved]
        create = bp.purpose == "training" and bool(unbound) and not t.placement_group
        image = IMAGES[t.ami.image]
        strategy, why = rollout(bp)
        arches = tuple(dict.fromkeys(g.instance.arch for g in groups))
        return (
            AwsPlan(
                nodes,
                public,
                partition(t.region),
                create,
                t.placement_group,
                image,
                strategy,
                why,
                arches,
            ),
            (),
        )

    def image_pin(self, target: Any, target_plan: AwsPlan) -> dict[str, str]:
        """The AMI by id where the blueprint gives one, else the lookup that resolves it at
        launch (the stack's ImagePin records what it resolved)."""
        if target.ami.id:
            return {"ami": target.ami.id}
        image = target_plan.image
        out = {}
        for arch in target_plan.arches:
            key = "ami" if arch == "x86_64" else f"ami-{arch}"
            name = image.name_filter_for(arch)
            out[key] = f"lookup owner={image.owner} name={name} (resolved at launch)"
        return out

    def cost(self, plan: Basis) -> TargetCost:
        return cost.cost(plan)

    def ssh_user(self, target) -> str:
        return IMAGES[target.ami.image].ssh_user

    def role_vars(self, plan: Basis):
        return ansible.role_vars(plan)

    def inventory_vars(self, plan: Basis):
        return ansible.inventory_vars(plan)

    def stack_config(self, target):
        return {"aws:region": target.region}

    def offline_answers(self):
        return ANSWERS

    def replace_rules(self):
        return replaces.RULES

    def replacement(self, plan, resources):
        return replacement.replacement(plan, resources)

    def data_pieces(self, plan):
        return data_layout.pieces(plan)


COMPILER = AwsCompiler()
