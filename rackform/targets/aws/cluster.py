"""A cluster on AWS: network, node identity (IAM role and instance profile with SSM), the machine
image, a cluster placement group for training, and one AwsNodeGroup per node group."""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from rackform.targets.aws.network import AwsNetwork
from rackform.targets.aws.nodes import AwsNodeGroup
from rackform.targets.aws.tags import aws_tags
from rackform.plan.model import ClusterSpec

SSM_POLICY = "policy/AmazonSSMManagedInstanceCore"
# Markets whose capacity already has a place: a capacity block or an On-Demand Capacity
# Reservation was bought in a given spot of a zone, and launching it into a placement group that
# rackform just created (and the reservation therefore is not in) is refused by EC2.
RESERVED_MARKETS = ("capacity-block", "reservation")


def partition(region: str) -> str:
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    if region.startswith("cn-"):
        return "aws-cn"
    return "aws"


def assume_role_policy() -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": "ec2.amazonaws.com"},
                    "Action": "sts:AssumeRole",
                }
            ],
        },
        sort_keys=True,
    )


def wants_placement_group(spec: ClusterSpec) -> bool:
    """Training nodes share a cluster placement group (one spine, lowest EFA latency); inference
    nodes do not need one, and reserved capacity is placed by its reservation."""
    return spec.purpose == "training" and spec.target.market not in RESERVED_MARKETS


class AwsCluster(pulumi.ComponentResource):
    """Everything a cluster needs on AWS."""

    nodes: pulumi.Output  # {node group: [[name, address, port], ...]}
    node_resources: list[pulumi.Resource]

    def __init__(self, name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rackform:aws:Cluster", name, None, opts)
        target = spec.target
        child = pulumi.ResourceOptions(parent=self)
        name = spec.stack  # children are named after the cluster, as their Name tags are
        self.network = AwsNetwork(f"{name}-network", spec, opts=child)

        role = aws.iam.Role(
            f"{name}-node-role",
            description=f"rackform {spec.stack} GPU nodes (SSM)",
            assume_role_policy=assume_role_policy(),
            tags=aws_tags(spec, f"{name}-node-role"),
            opts=child,
        )
        # SSM gives a shell and command channel without opening any port.
        aws.iam.RolePolicyAttachment(
            f"{name}-node-ssm",
            role=role.name,
            policy_arn=f"arn:{partition(target.region)}:iam::aws:{SSM_POLICY}",
            opts=child,
        )
        profile = aws.iam.InstanceProfile(
            f"{name}-node-profile",
            role=role.name,
            tags=aws_tags(spec, f"{name}-node-profile"),
            opts=child,
        )

        if target.ami.id:
            ami: pulumi.Input[str] = target.ami.id
        else:
            ami = aws.ec2.get_ami_output(
                most_recent=True,
                owners=[target.ami.owner],
                filters=[
                    {"name": "name", "values": [target.ami.name_filter]},
                    {"name": "architecture", "values": ["x86_64"]},
                    {"name": "state", "values": ["available"]},
                ],
                opts=pulumi.InvokeOutputOptions(parent=self),
            ).id

        placement = None
        if wants_placement_group(spec):
            placement = aws.ec2.PlacementGroup(
                f"{name}-pg",
                strategy="cluster",
                tags=aws_tags(spec, f"{name}-pg"),
                opts=child,
            )

        self.groups = [
            AwsNodeGroup(
                f"{name}-{g.name}",
                spec,
                g,
                ami=ami,
                pin_ami=not target.ami.id,
                subnet=self.network.subnet,
                security_group=self.network.security_group,
                instance_profile=profile,
                placement_group=placement,
                opts=child,
            )
            for g in spec.node_groups
        ]
        self.node_resources = [r for g in self.groups for r in g.resources]
        names = [g.name for g in spec.node_groups]
        self.nodes = pulumi.Output.all(*[g.nodes for g in self.groups]).apply(
            lambda lists: dict(zip(names, lists, strict=True))
        )
        self.register_outputs({"nodes": self.nodes, "vpc_id": self.network.vpc.id})
