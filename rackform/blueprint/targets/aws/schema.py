"""The AWS target's part of the blueprint: where and how capacity is bought, the fields its node
groups add, and the rules that need the whole blueprint or the catalog (EFA only
where the type has it, a VPC large enough for the subnets the plan cuts from it)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from rackform.blueprint.schema.base import Cidr, Strict, Violation, check, closest
from rackform.blueprint.targets.aws import idle
from rackform.blueprint.targets.aws.catalog import load_aws_catalog
from rackform.blueprint.targets.aws.exposure import public_share
from rackform.blueprint.targets.aws.groups import (
    RESERVATION_ID,
    RESERVED_MARKETS,
    AwsGroupFields,
    Market,
    group_rules,
)
from rackform.blueprint.targets.aws.image_fields import AwsImageFields, image_rules
from rackform.blueprint.targets.aws.images import DEFAULT_IMAGE, IMAGES
from rackform.blueprint.targets.aws.scheduler import scheduler_rules
from rackform.blueprint.targets.schema import Cluster, TargetSchema
from rackform.catalog import Catalog

# The nodes' subnet is the VPC's first half and the NAT gateway's public subnet a /28 at its
# end (AWS's smallest subnet: "The allowed block size is between a /28 netmask and /16", VPC
# user guide, "Subnet CIDR blocks"), so the VPC must be an IPv4 /27 or larger.
SMALLEST_VPC_PREFIX = 27


class AmiSpec(Strict):
    image: Annotated[
        Literal[tuple(IMAGES)],
        Field(
            description="Machine image: a plain Ubuntu LTS (the roles install everything) or the "
            "AWS Deep Learning Base AMI (dlami-*, whose preinstalled driver, EFA, NCCL and DCGM "
            "the roles adopt). With `id`, says which of these the id is."
        ),
    ] = DEFAULT_IMAGE
    id: Annotated[
        str | None,
        Field(
            description="An explicit AMI id (ami-...), of the kind `image` names. Without it the "
            "newest image matching `image` at the first `up` is used and kept.",
            pattern=r"^ami-[0-9a-f]{8,17}$",
        ),
    ] = None
    instance_store: Annotated[
        Literal["adopt", "replace"],
        Field(
            description="DLAMI only: `adopt` uses the array the DLAMI mounts at /opt/dlami/nvme "
            "for checkpoints; `replace` unmounts it and builds rackform's array on its drives "
            "(needs storage.checkpoint.allow_wipe)."
        ),
    ] = "adopt"


class RolloutSpec(Strict):
    strategy: Annotated[
        Literal["delete-first", "create-first"] | None,
        Field(
            description="How a node is replaced when what it is changes (instance type, image, "
            "driver branch, zone): `delete-first` takes the old node down before its "
            "replacement launches (no capacity beyond the cluster's own; the nodes are down "
            "until the new ones are configured), `create-first` launches the replacement "
            "first (twice the capacity, briefly). Default: delete-first where capacity is bound "
            "(training: a cluster placement group, a reservation or a capacity block; inference "
            "on reserved capacity), create-first otherwise."
        ),
    ] = None


class AwsTarget(Strict):
    type: Annotated[Literal["aws"], Field(description="Amazon EC2.")]
    region: Annotated[str, Field(description="AWS region, e.g. us-east-1.")]
    availability_zone: Annotated[
        str, Field(description="Zone inside the region; placement groups need one zone.")
    ]
    ssh_cidrs: Annotated[
        tuple[Cidr, ...],
        Field(
            description="Private networks (VPN, peering, Direct Connect) that may also reach the "
            "nodes' SSH directly. The controller does not need any: it reaches the nodes through "
            "the stack's EC2 Instance Connect Endpoint. Together they may not cover more than "
            "ssh_max_public_share_pct of the internet.",
        ),
    ] = ()
    ssh_max_public_share_pct: Annotated[
        float,
        Field(
            description="The largest share of the routable internet (percent) ssh_cidrs may "
            "cover together; private blocks count as none.",
            ge=0,
            le=1,
        ),
    ] = 0.01
    allow_public_ssh: Annotated[
        bool,
        Field(
            description="Refused on aws: the nodes have no public address, so SSH from the "
            "internet could not reach them; use ssh_cidrs or the Instance Connect Endpoint."
        ),
    ] = False
    vpc_cidr: Annotated[
        Cidr, Field(description="CIDR of the cluster's VPC: IPv4, a /27 or larger.")
    ] = "10.0.0.0/16"
    market: Annotated[
        Market,
        Field(description="How capacity is bought (a node group may say otherwise: its market)."),
    ] = "on-demand"
    reservation_id: Annotated[
        str | None,
        Field(
            description="Capacity reservation / capacity block id (cr-...), for those markets.",
            pattern=RESERVATION_ID,
        ),
    ] = None
    placement_group: Annotated[
        str | None,
        Field(
            description="An existing cluster placement group for training nodes, by name: the "
            "one a capacity reservation was made in. Without it, training on on-demand or spot "
            "gets a placement group of its own, and reserved capacity none.",
            min_length=1,
            max_length=255,
        ),
    ] = None
    ami: Annotated[AmiSpec, Field(description="Machine image.")] = AmiSpec()
    rollout: Annotated[
        RolloutSpec, Field(description="How nodes are replaced (see rollout.strategy).")
    ] = RolloutSpec()
    key_name: Annotated[
        str | None,
        Field(
            description="An EC2 key pair for people to log in with, as well as the stack's own "
            "key (rackform does not need it)."
        ),
    ] = None

    @model_validator(mode="after")
    def _rules(self) -> AwsTarget:
        out = []
        # A zone is its region's code and a letter (us-east-1a), or a Local Zone's
        # (us-east-1-bos-1a): EC2 user guide, "Regions and Zones".
        zone = re.fullmatch(
            re.escape(self.region) + r"([a-z]|-[a-z]+-\d+[a-z])", self.availability_zone
        )
        if zone is None:
            out.append(
                Violation(
                    ("availability_zone",),
                    f"zone {self.availability_zone!r} is not in region {self.region!r}",
                    f"use a zone such as {self.region}a",
                )
            )
        if self.allow_public_ssh:
            out.append(
                Violation(
                    ("allow_public_ssh",),
                    "aws nodes have no public address: SSH from the internet cannot reach them",
                    "remove allow_public_ssh; the controller reaches the nodes through the "
                    "stack's EC2 Instance Connect Endpoint, people through ssh_cidrs",
                )
            )
        share = public_share(self.ssh_cidrs) * 100
        if share > self.ssh_max_public_share_pct:
            out.append(
                Violation(
                    ("ssh_cidrs",),
                    f"ssh_cidrs together open SSH to {share:.3g}% of the internet "
                    f"(the limit is {self.ssh_max_public_share_pct:g}%)",
                    "list private networks (VPN, peering) or a few public addresses of your own",
                )
            )
        vpc = ipaddress.ip_network(self.vpc_cidr)
        if vpc.version != 4 or vpc.prefixlen > SMALLEST_VPC_PREFIX:
            out.append(
                Violation(
                    ("vpc_cidr",),
                    f"{self.vpc_cidr} is too small to split into a nodes and a NAT subnet",
                    f"use a /{SMALLEST_VPC_PREFIX} or larger IPv4 block, e.g. 10.0.0.0/16",
                )
            )
        needs_res = self.market in RESERVED_MARKETS
        if needs_res and not self.reservation_id:
            out.append(
                Violation(
                    ("reservation_id",),
                    f"market {self.market!r} needs a reservation_id",
                    "add reservation_id: cr-...",
                )
            )
        if not needs_res and self.reservation_id:
            out.append(
                Violation(
                    ("reservation_id",),
                    f"reservation_id is only used with capacity-block or reservation, not {self.market!r}",
                    "remove reservation_id or change market",
                )
            )
        check(out)
        return self


def region_rules(region: object, catalog: Catalog) -> list[Violation]:
    """The region must be one the AWS provider knows (the catalog's list, from the provider)."""
    regions = load_aws_catalog().regions
    if not isinstance(region, str) or region in regions:
        return []
    return [
        Violation(
            ("target", "region"),
            f"{region!r} is not an AWS region",
            closest(region, list(regions)),
        )
    ]


def arch_rules(bp: Cluster) -> list[Violation]:
    """Every node group's CPU architecture (its instance type's: arm64 for Grace) needs a
    build of the machine image for it; one explicit AMI serves one architecture; the node
    image is baked on an x86_64 builder only."""
    instances = load_aws_catalog().instances
    arches = {
        i: instances[g.instance_type].arch
        for i, g in enumerate(bp.node_groups)
        if g.instance_type in instances
    }
    t, out = bp.target, []
    image = IMAGES[t.ami.image]
    for i, arch in arches.items():
        if not t.ami.id and not image.serves(arch):
            out.append(
                Violation(
                    ("node_groups", i, "instance_type"),
                    f"{bp.node_groups[i].instance_type} is {arch}, and no {arch} build of "
                    f"{image.key} is known",
                    "use ami.image: ubuntu-22.04 or ubuntu-24.04 (both have arm64 builds), or "
                    f"an explicit ami.id of an {arch} image",
                )
            )
    if t.ami.id and len(set(arches.values())) > 1:
        out.append(
            Violation(
                ("target", "ami", "id"),
                f"one AMI cannot boot node groups of {' and '.join(sorted(set(arches.values())))}",
                "remove ami.id (each architecture gets its own image of ami.image), or split "
                "the cluster",
            )
        )
    bake = getattr(bp.image, "bake", False) if bp.image is not None else False
    if bake and any(a != "x86_64" for a in arches.values()):
        out.append(
            Violation(
                ("image", "bake"),
                "the node image is baked on an x86_64 builder only; an arm64 node group "
                "cannot boot it",
                "remove image.bake (the roles configure arm64 nodes after launch)",
            )
        )
    return out


def rules(bp: Cluster, catalog: Catalog) -> list[Violation]:
    """The AWS rules that need the whole blueprint or the catalog."""
    out = region_rules(bp.target.region, catalog)
    out += group_rules(bp.purpose, list(enumerate(bp.node_groups)), catalog)
    if bp.network.fabric == "efa":
        for i, g in enumerate(bp.node_groups):
            it = load_aws_catalog().instances.get(g.instance_type or "")
            if it is not None and it.efa_interfaces.value == 0:
                out.append(
                    Violation(
                        ("node_groups", i, "instance_type"),
                        f"{it.key} has no EFA interface",
                        "choose an EFA-capable type or fabric: ethernet",
                    )
                )
    t = bp.target
    if t.placement_group and bp.purpose != "training":
        out.append(
            Violation(
                ("target", "placement_group"),
                "inference nodes are not placed in a cluster placement group",
                "remove placement_group (training only)",
            )
        )
    image = IMAGES[t.ami.image]
    if t.ami.instance_store == "replace":
        if not image.instance_store_mount:
            out.append(
                Violation(
                    ("target", "ami", "instance_store"),
                    f"{image.key} mounts no instance store of its own: there is nothing to replace",
                    "remove instance_store (it is for the dlami-* images)",
                )
            )
        elif not bp.storage.checkpoint.allow_wipe:
            out.append(
                Violation(
                    ("target", "ami", "instance_store"),
                    f"replacing the array {image.key} mounts at {image.instance_store_mount} "
                    "erases its drives",
                    "set storage.checkpoint.allow_wipe: true, or instance_store: adopt",
                )
            )
    out += arch_rules(bp)
    w = bp.workload
    no_interval = w is None or w.checkpoint_interval_min is None
    spot = [("target", "market")] if bp.target.market == "spot" else []
    spot += [
        ("node_groups", i, "market") for i, g in enumerate(bp.node_groups) if g.market == "spot"
    ]
    if spot and bp.purpose == "training" and no_interval:
        # Spot capacity is reclaimed with two minutes' notice: only a job that checkpoints
        # and resumes can use it without losing its work.
        out.append(
            Violation(
                spot[0],
                "spot training needs a job that checkpoints and resumes; this blueprint states no checkpoint interval",
                "set workload.checkpoint_interval_min, or use market: on-demand",
            )
        )
    return out


class AwsSchema(TargetSchema):
    type = "aws"
    model = AwsTarget
    group_fields = AwsGroupFields
    image_fields = AwsImageFields
    # EFA exists only on AWS; InfiniBand and RoCE do not.
    fabrics = ("efa", "ethernet")
    # Instances are named by the stack (`{stack}-{group}-{i}`), which differs per environment.
    unnamed_nodes = "on AWS the nodes' names are the stack's"

    def rules(self, bp: Cluster, catalog: Catalog) -> list[Violation]:
        return rules(bp, catalog)

    def group_rules(self, purpose, groups, catalog: Catalog) -> list[Violation]:
        return group_rules(purpose, groups, catalog)

    def target_rules(self, raw: Mapping[str, Any], catalog: Catalog) -> list[Violation]:
        return region_rules(raw.get("region"), catalog)

    def image_rules(self, bp: Cluster, catalog: Catalog) -> list[Violation]:
        # EC2 Image Builder bakes the image in the stack.
        return image_rules(bp)

    def scheduler_rules(self, bp: Cluster, catalog: Catalog) -> list[Violation]:
        # The stack creates the controller's instance: no `controller` host, its type, the image.
        return scheduler_rules(bp, catalog)

    def idle_actions(self, purpose: str) -> tuple[str, ...]:
        return idle.ACTIONS[purpose]

    def idle_rules(self, bp: Cluster) -> list[Violation]:
        return super().idle_rules(bp) + idle.idle_rules(bp)

    def heal_actions(self) -> tuple[str, ...]:
        # "Replace, don't repair": a failed instance is terminated and its group or the stack
        # brings a new one; there is no BMC to power-cycle.
        return (*super().heal_actions(), "replace")

    def shared_kinds(self) -> tuple[str, ...]:
        # FSx for Lustre and EFS, created in the nodes' subnet or named by id.
        return (*super().shared_kinds(), "fsx", "efs")


SCHEMA = AwsSchema()
