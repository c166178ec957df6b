"""The cluster's network on AWS: a VPC, a private subnet for the nodes in the blueprint's zone,
outbound internet through a NAT gateway (drivers and packages are installed after launch), the
security group EFA needs, and the controller's way in: an EC2 Instance Connect Endpoint.

Why the Instance Connect Endpoint: it reaches nodes in a private subnet with no public address,
no inbound port from the internet and no bastion to patch; access is IAM
(`ec2-instance-connect:OpenTunnel`, with conditions on port and source), and it is plain SSH
underneath, so Ansible, the roles' reboots and `ssh` work unchanged, with the stack's own keys
and host-key checking. SSM Session Manager would need the session-manager-plugin binary on the
controller and an S3 bucket for Ansible's file transfer. (EC2 user guide, "Connect to your
instances using EC2 Instance Connect Endpoint"; each endpoint carries up to 20 concurrent
connections, so the runner opens at most 20 at a time on AWS.)"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from rackform.plan.model import Plan
from rackform.targets.aws.tags import aws_tags

ANYWHERE = "0.0.0.0/0"
SSH = {"protocol": "tcp", "from_port": 22, "to_port": 22}


def ssh_rules(cidrs: tuple[str, ...], endpoint_sg) -> list[dict[str, object]]:
    """SSH (tcp/22) from the Instance Connect Endpoint, and from the blueprint's private
    networks when it lists any (the schema refused a set covering more of the internet than its
    limit)."""
    rules: list[dict[str, object]] = [
        {
            "description": "SSH from the EC2 Instance Connect Endpoint (the controller)",
            **SSH,
            "security_groups": [endpoint_sg],
        }
    ]
    v4 = [c for c in cidrs if ipaddress.ip_network(c).version == 4]
    v6 = [c for c in cidrs if ipaddress.ip_network(c).version == 6]
    if v4 or v6:
        rule: dict[str, object] = {"description": "SSH from the blueprint's ssh_cidrs", **SSH}
        if v4:
            rule["cidr_blocks"] = v4
        if v6:
            rule["ipv6_cidr_blocks"] = v6
        rules.append(rule)
    return rules


class Held:
    """A resource another stack holds, known here by its id: what the cluster's stack reads of
    the data tier's stack."""

    def __init__(self, id_: pulumi.Input[str]):
        self.id = id_


class Placement:
    """How a piece of the nodes' network (or the shared tier) is registered: the options and
    arguments it gets beyond its own. The plain one, in the cluster's stack, adds nothing; the
    data tier's stack adds an alias and, for a piece found in AWS, its import
    (`data_tier.Kept`)."""

    def options(self, parent, name: str, **kw) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=parent, **kw)

    def args(self, name: str) -> dict[str, object]:
        return {}


@dataclass(frozen=True)
class NodesNetwork:
    """The VPC, the nodes' subnet, their security group and the one SSH comes from: what a kept
    file system sits in, so they live in the data tier's stack where there is one
    (the plan's data layout says why)."""

    vpc: aws.ec2.Vpc | Held
    subnet: aws.ec2.Subnet | Held
    endpoint_sg: aws.ec2.SecurityGroup | Held
    security_group: aws.ec2.SecurityGroup | Held

    @staticmethod
    def held(ids: Mapping[str, pulumi.Input[str]]) -> NodesNetwork:
        """The network another stack holds, from its outputs (`NETWORK_OUTPUTS`)."""
        return NodesNetwork(*(Held(ids[k]) for k in NETWORK_OUTPUTS))

    def outputs(self) -> dict[str, pulumi.Input[str]]:
        return dict(
            zip(
                NETWORK_OUTPUTS,
                (self.vpc.id, self.subnet.id, self.endpoint_sg.id, self.security_group.id),
                strict=True,
            )
        )


# The data tier's stack exports the network's ids under these names, in NodesNetwork's order.
NETWORK_OUTPUTS = ("vpc_id", "subnet_id", "endpoint_security_group_id", "security_group_id")


def nodes_network(plan: Plan, parent, place: Placement | None = None) -> NodesNetwork:
    """Create the VPC, the nodes' subnet and the two security groups under `parent`."""
    place = place or Placement()
    target = plan.target
    nodes_cidr = plan.target_plan.nodes_cidr
    name = plan.stack  # named after the cluster, as their Name tags are

    def tags(suffix: str) -> dict[str, str]:
        return aws_tags(plan, f"{name}-{suffix}")

    vpc = aws.ec2.Vpc(
        f"{name}-vpc",
        cidr_block=target.vpc_cidr,
        enable_dns_support=True,
        enable_dns_hostnames=True,
        tags=tags("vpc"),
        opts=place.options(parent, f"{name}-vpc"),
    )
    # A subnet in another zone is a new subnet with the same CIDR, which AWS refuses beside
    # the old one ("The CIDR blocks of the subnets within a VPC cannot overlap", VPC user
    # guide, "Subnet CIDR blocks"): the old one goes first, and Pulumi deletes what must be
    # replaced with it (the endpoint, the NAT gateway) before it (Pulumi docs, resource
    # option `deleteBeforeReplace`).
    # Nodes never get public addresses: SSH comes through the Instance Connect Endpoint, or
    # from ssh_cidrs over private networks (VPN, peering, transit gateway).
    subnet = aws.ec2.Subnet(
        f"{name}-nodes",
        vpc_id=vpc.id,
        cidr_block=nodes_cidr,
        availability_zone=target.availability_zone,
        map_public_ip_on_launch=False,
        tags=tags("nodes"),
        opts=place.options(parent, f"{name}-nodes", delete_before_replace=True),
    )
    # The endpoint's own group: out to the nodes' SSH only, nothing in (the endpoint is
    # reached through the EC2 API, not through the VPC).
    endpoint_sg = aws.ec2.SecurityGroup(
        f"{name}-eice-sg",
        **place.args(f"{name}-eice-sg"),
        vpc_id=vpc.id,
        description=f"rackform {plan.stack}: EC2 Instance Connect Endpoint, SSH to the nodes",
        egress=[
            {
                "description": "SSH to the nodes",
                **SSH,
                "cidr_blocks": [nodes_cidr],
            }
        ],
        tags=tags("eice-sg"),
        opts=place.options(parent, f"{name}-eice-sg"),
    )
    # EFA needs every protocol and port open between the nodes, in and out, through a rule
    # that names the security group itself; anything else in is SSH (see ssh_rules).
    security_group = aws.ec2.SecurityGroup(
        f"{name}-sg",
        **place.args(f"{name}-sg"),
        vpc_id=vpc.id,
        description=f"rackform {plan.stack}: all traffic between nodes, SSH from the endpoint",
        ingress=[
            {
                "description": "all traffic between the cluster's nodes (EFA, NCCL)",
                "protocol": "-1",
                "from_port": 0,
                "to_port": 0,
                "self": True,
            },
            *ssh_rules(target.ssh_cidrs, endpoint_sg.id),
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
        opts=place.options(parent, f"{name}-sg"),
    )
    return NodesNetwork(vpc, subnet, endpoint_sg, security_group)


class AwsNetwork(pulumi.ComponentResource):
    """The nodes' network (created here, or `held` by the data tier's stack), the public subnet,
    NAT egress and the Instance Connect Endpoint."""

    vpc: aws.ec2.Vpc | Held
    subnet: aws.ec2.Subnet | Held
    security_group: aws.ec2.SecurityGroup | Held
    endpoint: aws.ec2transitgateway.InstanceConnectEndpoint
    s3_endpoint: aws.ec2.VpcEndpoint | None

    def __init__(
        self,
        name: str,
        plan: Plan,
        *,
        s3_endpoint: bool = False,
        held: NodesNetwork | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("rackform:aws:Network", name, None, opts)
        target = plan.target
        public_cidr = plan.target_plan.public_cidr
        child = pulumi.ResourceOptions(parent=self)
        name = plan.stack  # children are named after the cluster, as their Name tags are

        def tags(suffix: str) -> dict[str, str]:
            return aws_tags(plan, f"{name}-{suffix}")

        base = held or nodes_network(plan, self)
        self.vpc, self.subnet, self.security_group = base.vpc, base.subnet, base.security_group
        # The public subnet goes first when replaced, as the nodes' does (nodes_network).
        first = pulumi.ResourceOptions(parent=self, delete_before_replace=True)
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
            opts=first,
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
        self.endpoint = aws.ec2transitgateway.InstanceConnectEndpoint(
            f"{name}-eice",
            subnet_id=self.subnet.id,
            security_group_ids=[base.endpoint_sg.id],
            # The nodes see the endpoint's address, so their group admits it by group.
            preserve_client_ip=False,
            tags=tags("eice"),
            opts=child,
        )
        # Nodes that configure themselves fetch their artifact from S3 through a gateway
        # endpoint: the bucket admits requests from this endpoint only (the
        # bootstrap bucket's policy), and the traffic stays off the NAT gateway.
        self.s3_endpoint = None
        if s3_endpoint:
            self.s3_endpoint = aws.ec2.VpcEndpoint(
                f"{name}-s3",
                vpc_id=self.vpc.id,
                service_name=f"com.amazonaws.{target.region}.s3",
                vpc_endpoint_type="Gateway",
                route_table_ids=[nodes_rt.id],
                tags=tags("s3"),
                opts=child,
            )
        self.register_outputs(
            {
                "vpc_id": self.vpc.id,
                "subnet_id": self.subnet.id,
                "security_group_id": self.security_group.id,
            }
        )
