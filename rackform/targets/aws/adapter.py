"""The AWS target: EC2 instances (training) or an autoscaling group (inference) in a VPC of
their own. Compile takes each node group's instance facts from the catalog and cuts the VPC's
subnets; cost prices the instances for the blueprint's market."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from rackform.blueprint.schema.sections import NodeGroup
from rackform.catalog import Catalog
from rackform.plan.arrays import array_plan
from rackform.plan.model import NodeGroupPlan, Plan
from rackform.plan.pricing import UNPRICED, Line, TargetCost, src
from rackform.targets.aws import idle, schema
from rackform.targets.aws.images import IMAGES, Image
from rackform.targets.base import Adapter

# Markets whose capacity already has a place: a capacity block or an On-Demand Capacity
# Reservation was bought in a given spot of a zone, and launching it into a placement group that
# rackform just created (and the reservation therefore is not in) is refused by EC2.
RESERVED_MARKETS = ("capacity-block", "reservation")


@dataclass(frozen=True)
class AwsPlan:
    nodes_cidr: str  # the VPC's first half: the private subnet of the nodes
    public_cidr: str  # a small block at the VPC's end: the NAT gateway's public subnet
    partition: str  # arn partition of the region
    placement_group: bool  # training nodes share a cluster placement group the stack creates
    existing_placement_group: str | None  # ... or one that exists already, by name
    image: Image  # the machine image's kind: filter, user, what it preinstalled


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


class AwsAdapter(Adapter):
    type = "aws"
    schema = schema.AwsTarget
    # EFA exists only on AWS; InfiniBand and RoCE do not.
    fabrics = ("efa", "ethernet")
    nodes_listed = False
    owned = False

    def on_demand(self, target) -> bool:
        return target.market == "on-demand"

    def rules(self, bp, catalog: Catalog):
        return schema.rules(bp, catalog)

    def group_rules(self, purpose, groups, catalog: Catalog):
        return schema.group_rules(purpose, groups, catalog)

    def target_rules(self, raw, catalog: Catalog):
        return schema.region_rules(raw.get("region"), catalog)

    def idle_actions(self, purpose: str) -> tuple[str, ...]:
        return idle.ACTIONS[purpose]

    def idle_rules(self, bp):
        return super().idle_rules(bp) + idle.idle_rules(bp)

    def reaper(self):
        from rackform.targets.aws.reap import AwsReaper

        return AwsReaper()

    def ssh_user(self, target) -> str:
        return IMAGES[target.ami.image].ssh_user

    def role_vars(self, plan: Plan) -> Mapping[str, object]:
        """On an image that preinstalled the driver and mounts the instance store itself (the
        DLAMI), the roles adopt the driver (refusing a second branch) and use or replace its
        array, as the blueprint says."""
        image = plan.target_plan.image
        if not image.preinstalled:
            return {}
        return {
            "nvidia_driver_adopt_preinstalled": True,
            "nvme_raid_preexisting_mount": image.instance_store_mount,
            "nvme_raid_preexisting_action": plan.target.ami.instance_store,
        }

    def inventory_vars(self, plan: Plan) -> Mapping[str, object]:
        """The nodes have no public address and no inbound port from the internet: the
        controller's SSH goes through the stack's EC2 Instance Connect Endpoint, tunnelled by
        the AWS CLI (`aws ec2-instance-connect open-tunnel`, AWS CLI v2; EC2 user guide,
        "Connect to an instance using EC2 Instance Connect Endpoint"). Each node's instance id
        comes with the stack's outputs (`rackform_instance_id`)."""
        return {
            # The instances the stack just launched boot first: the roles wait for their SSH.
            "rackform_wait_for_nodes_s": 600,
            "rackform_ssh_proxy": (
                "aws ec2-instance-connect open-tunnel --region "
                f"{plan.target.region} --instance-id {{{{ rackform_instance_id }}}}"
            ),
        }

    def compile_group(self, bp, group: NodeGroup, catalog: Catalog) -> NodeGroupPlan:
        it = catalog.instance(group.instance_type)
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
        )

    def compile_target(self, bp, groups, catalog):
        t = bp.target
        nodes, public = split_vpc(t.vpc_cidr)
        # Reserved capacity sits where it was bought: it may name the placement group it was
        # reserved in, but rackform never creates one around it.
        create = (
            bp.purpose == "training" and t.market not in RESERVED_MARKETS and not t.placement_group
        )
        image = IMAGES[t.ami.image]
        return AwsPlan(nodes, public, partition(t.region), create, t.placement_group, image), ()

    def stack_config(self, target) -> Mapping[str, str]:
        return {"aws:region": target.region}

    def check_stack_config(self, plan: Plan, setting) -> None:
        """The blueprint is the source of truth; a stack whose aws:region says otherwise would
        create the cluster somewhere the blueprint does not say."""
        from rackform.stack.errors import ProgramError

        region = setting("aws:region")
        if region and region != plan.target.region:
            raise ProgramError(
                f"stack config aws:region is {region} but the blueprint says {plan.target.region}",
                path=("target", "region"),
                fix=f"run `pulumi config set aws:region {plan.target.region}` or fix the blueprint",
            )

    def cost(self, plan: Plan) -> TargetCost:
        t, c = plan.target, plan.figures.cost
        hours = c.hours_per_month.value
        lines, notes, lo, hi = [], [], 0.0, 0.0
        unpriced = sorted(
            {g.instance.key for g in plan.node_groups if t.region not in g.instance.priced_in}
        )
        if unpriced:
            where = ", ".join(plan.node_groups[0].instance.priced_in)
            notes.append(
                f"{UNPRICED}: the catalog has no price for {', '.join(unpriced)} in "
                f"{t.region} (it prices {where}); another region's price is not used"
            )
            return TargetCost(f"aws {t.market}", (), None, tuple(notes))
        for g in plan.node_groups:
            it = g.instance
            od = it.on_demand_usd_hr
            what = f"{g.count} x {it.key} {t.market}"
            if t.market == "on-demand":
                price, where = od.value, src(od)
            elif t.market == "spot":
                price = od.value * (1 - c.spot_discount_low.value)
                lo += g.count * od.value * (1 - c.spot_discount_high.value)
                hi += g.count * price
                what += f" (on-demand less {c.spot_discount_low.value:.0%})"
                where = src(od, c.spot_discount_low)
            elif t.market == "reservation":
                price = od.value * c.reservation_rate_of_on_demand.value
                where = src(od, c.reservation_rate_of_on_demand)
            else:  # capacity-block
                if it.capacity_block_usd_hr is None:
                    notes.append(
                        f"{UNPRICED}: the catalog has no capacity-block price for {it.key}"
                    )
                    return TargetCost(f"aws {t.market}", (), None, tuple(notes))
                price, where = it.capacity_block_usd_hr.value, src(it.capacity_block_usd_hr)
            lines.append(Line(what, g.count * price, g.count * price * hours, where))
            if g.max_count is not None and g.max_count > g.count:
                notes.append(
                    f"{g.name} autoscales to {g.max_count} nodes: up to "
                    f"${g.max_count * price * hours:,.0f}/month"
                )
        spot = None
        if t.market == "spot":
            spot = (lo, hi)
            notes.append(
                f"spot prices vary; the catalog's discount range "
                f"{c.spot_discount_low.value:.0%}-{c.spot_discount_high.value:.0%} gives "
                f"${lo:,.2f}-${hi:,.2f}/hour"
            )
        return TargetCost(f"aws {t.market}", tuple(lines), spot, tuple(notes))

    def component(self, name, plan, opts, providers):
        from rackform.targets.aws.cluster import AwsCluster  # pulumi_aws loads only for AWS

        return AwsCluster(f"{name}-aws", plan, opts=opts)


ADAPTER = AwsAdapter()
