"""The cluster's network on AWS: a VPC, a private subnet for the nodes in the blueprint's zone,
outbound internet through a NAT gateway (drivers and packages are installed after launch), and
the security group EFA needs."""

from __future__ import annotations

import ipaddress

import pulumi
import pulumi_aws as aws

from rackform.plan.model import Plan
from rackform.targets.aws.tags import aws_tags

ANYWHERE = "0.0.0.0/0"


def ssh_rule(cidrs: tuple[str, ...]) -> dict[str, object]:
    """SSH (tcp/22) from the blueprint's CIDRs only; the schema already refused 0.0.0.0/0 and ::/0
    unless the blueprint set allow_public_ssh."""
    v4 = [c for c in cidrs if ipaddress.ip_network(c).version == 4]
    v6 = [c for c in cidrs if ipaddress.ip_network(c).version == 6]
    rule: dict[str, object] = {
        "description": "SSH from the blueprint's ssh_cidrs",
        "protocol": "tcp",
        "from_port": 22,
        "to_port": 22,
    }
    if v4:
        rule["cidr_blocks"] = v4
    if v6:
        rule["ipv6_cidr_blocks"] = v6
    return rule


class AwsNetwork(pulumi.ComponentResource):
    """VPC, subnets, NAT egress and the cluster security group."""

    vpc: aws.ec2.Vpc
    subnet: aws.ec2.Subnet
    security_group: aws.ec2.SecurityGroup

    def __init__(self, name: str, plan: Plan, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rackform:aws:Network", name, None, opts)
        target = plan.target
        nodes_cidr, public_cidr = plan.target_plan.nodes_cidr, plan.target_plan.public_cidr
        child = pulumi.ResourceOptions(parent=self)
        name = plan.stack  # children are named after the cluster, as their Name tags are

        def tags(suffix: str) -> dict[str, str]:
            return aws_tags(plan, f"{name}-{suffix}")

        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=target.vpc_cidr,
            enable_dns_support=True,
            enable_dns_hostnames=True,
            tags=tags("vpc"),
            opts=child,
        )
        # Nodes never get public addresses: SSH comes from ssh_cidrs over the private network
        # (VPN, peering, transit gateway) or through SSM, which the instance profile allows.
        self.subnet = aws.ec2.Subnet(
            f"{name}-nodes",
            vpc_id=self.vpc.id,
            cidr_block=nodes_cidr,
            availability_zone=target.availability_zone,
            map_public_ip_on_launch=False,
            tags=tags("nodes"),
            opts=child,
        )
        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=self.vpc.id, tags=tags("igw"), opts=child
        )
        public = aws.ec2.Subnet(
            f"{name}-public",
            vpc_id=self.vpc.id,
            cidr_block=public_cidr,
            availability_zone=target.availability_zone,
            map_public_ip_on_launch=False,
            tags=tags("public"),
            opts=child,
        )
        nat_ip = aws.ec2.Eip(f"{name}-nat-ip", domain="vpc", tags=tags("nat-ip"), opts=child)
        nat = aws.ec2.NatGateway(
            f"{name}-nat",
            allocation_id=nat_ip.id,
            subnet_id=public.id,
            tags=tags("nat"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
        )
        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt",
            vpc_id=self.vpc.id,
            routes=[{"cidr_block": ANYWHERE, "gateway_id": igw.id}],
            tags=tags("public-rt"),
            opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-public-rta", subnet_id=public.id, route_table_id=public_rt.id, opts=child
        )
        nodes_rt = aws.ec2.RouteTable(
            f"{name}-nodes-rt",
            vpc_id=self.vpc.id,
            routes=[{"cidr_block": ANYWHERE, "nat_gateway_id": nat.id}],
            tags=tags("nodes-rt"),
            opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-nodes-rta", subnet_id=self.subnet.id, route_table_id=nodes_rt.id, opts=child
        )
        # EFA needs every protocol and port open between the nodes, in and out, through a rule
        # that names the security group itself; anything else in is SSH from ssh_cidrs only.
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=self.vpc.id,
            description=f"rackform {plan.stack}: all traffic between nodes, SSH from ssh_cidrs",
            ingress=[
                {
                    "description": "all traffic between the cluster's nodes (EFA, NCCL)",
                    "protocol": "-1",
                    "from_port": 0,
                    "to_port": 0,
                    "self": True,
                },
                ssh_rule(target.ssh_cidrs),
            ],
            egress=[
                {
                    "description": "all traffic between the cluster's nodes (EFA, NCCL)",
                    "protocol": "-1",
                    "from_port": 0,
                    "to_port": 0,
                    "self": True,
                },
                {
                    "description": "outbound through the NAT gateway (packages, SSM)",
                    "protocol": "-1",
                    "from_port": 0,
                    "to_port": 0,
                    "cidr_blocks": [ANYWHERE],
                },
            ],
            tags=tags("sg"),
            opts=child,
        )
        self.register_outputs(
            {
                "vpc_id": self.vpc.id,
                "subnet_id": self.subnet.id,
                "security_group_id": self.security_group.id,
            }
        )
