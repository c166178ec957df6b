"""A cluster on AWS: network, node identity (IAM role and instance profile with SSM), the machine
image, a cluster placement group for training, and one AwsNodeGroup per node group."""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from rackform.plan.model import Plan
from rackform.targets.aws.network import AwsNetwork
from rackform.targets.aws.nodes import AwsNodeGroup
from rackform.targets.aws.tags import aws_tags

SSM_POLICY = "policy/AmazonSSMManagedInstanceCore"


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


class AwsCluster(pulumi.ComponentResource):
    """Everything a cluster needs on AWS."""

    nodes: pulumi.Output  # {node group: [[name, address, port], ...]}
    node_resources: list[pulumi.Resource]

    def __init__(self, name: str, plan: Plan, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rackform:aws:Cluster", name, None, opts)
        target = plan.target
        child = pulumi.ResourceOptions(parent=self)
        name = plan.stack  # children are named after the cluster, as their Name tags are
        self.network = AwsNetwork(f"{name}-network", plan, opts=child)

        role = aws.iam.Role(
            f"{name}-node-role",
            description=f"rackform {plan.stack} GPU nodes (SSM)",
            assume_role_policy=assume_role_policy(),
            tags=aws_tags(plan, f"{name}-node-role"),
            opts=child,
        )
        # SSM gives a shell and command channel without opening any port.
        aws.iam.RolePolicyAttachment(
            f"{name}-node-ssm",
            role=role.name,
            policy_arn=f"arn:{plan.target_plan.partition}:iam::aws:{SSM_POLICY}",
            opts=child,
        )
        profile = aws.iam.InstanceProfile(
            f"{name}-node-profile",
            role=role.name,
            tags=aws_tags(plan, f"{name}-node-profile"),
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
        if plan.target_plan.placement_group:
            placement = aws.ec2.PlacementGroup(
                f"{name}-pg",
                strategy="cluster",
                tags=aws_tags(plan, f"{name}-pg"),
                opts=child,
            )

        self.groups = [
            AwsNodeGroup(
                f"{name}-{g.name}",
                plan,
                g,
                ami=ami,
                pin_ami=not target.ami.id,
                subnet=self.network.subnet,
                security_group=self.network.security_group,
                instance_profile=profile,
                placement_group=placement,
                opts=child,
            )
            for g in plan.node_groups
        ]
        self.node_resources = [r for g in self.groups for r in g.resources]
        names = [g.name for g in plan.node_groups]
        self.nodes = pulumi.Output.all(*[g.nodes for g in self.groups]).apply(
            lambda lists: dict(zip(names, lists, strict=True))
        )
        self.register_outputs({"nodes": self.nodes, "vpc_id": self.network.vpc.id})
