"""What the AWS data tier's stack (`<stack>-data`, `Plan.data_stack`) holds, as data: each piece
with its Pulumi type, its logical name (its Name tag too), the components it sat under in the
cluster's stack before the data tier had a stack of its own, and how AWS finds it by its tags.

Why these pieces: a file system the stack keeps must outlive everything `rackform destroy`
deletes, and a file system's network interfaces sit in a subnet and a security group, which AWS
refuses to delete while they remain (DependencyViolation: "The subnet ... has dependencies and
cannot be deleted", EC2 API reference, DeleteSubnet and DeleteSecurityGroup; a file system's
elastic network interfaces are the file system's, FSx for Lustre user guide, "File system
access control with Amazon VPC"). So the data tier's stack holds the file system, the nodes'
subnet and security group it sits in (FSx for Lustre cannot move to another subnet or group:
terraform-provider-aws fsx/lustre_file_system.go, subnet_ids and security_group_ids ForceNew),
the VPC they belong to, and the Instance Connect Endpoint's group that the nodes' group admits
SSH from (so no rule of a kept group names a group the cluster's destroy deletes). The cluster's
stack reads their ids through a StackReference and creates the rest in that VPC.

The same pieces make three things agree: the data stack's program (its resources and aliases),
`rackform data move` (which resources of an existing stack move, by their URNs) and `rackform
up`'s adoption of pieces that outlived their stack's state (found by their tags). Pure: no
Pulumi, no AWS."""

from __future__ import annotations

from dataclasses import dataclass

from rackform.plan.model import Plan

PROJECT = "rackform"  # Pulumi.yaml's name: the project part of every URN
# The components a piece sat under in the cluster's stack (the stack's `Cluster`, then the AWS
# target's `AwsCluster`, then the network or the shared tier).
_CLUSTER = "rackform:cluster:Cluster$rackform:aws:Cluster"
NETWORK_CHAIN = f"{_CLUSTER}$rackform:aws:Network"
SHARED_CHAIN = f"{_CLUSTER}$rackform:aws:SharedStorage"


@dataclass(frozen=True)
class Piece:
    type: str  # the Pulumi type token
    name: str  # the logical name, and the Name tag of a taggable piece
    chain: str  # the parent components' types in the cluster's stack before the split
    lookup: str  # how `rackform up` finds it in AWS (the AWS target's `adopt`)

    def urn(self, stack: str, chain: str | None = None) -> str:
        """Its URN in `stack` under the components `chain` (default: its former ones)."""
        return f"urn:pulumi:{stack}::{PROJECT}::{chain or self.chain}${self.type}::{self.name}"


VPC = "aws:ec2/vpc:Vpc"
SUBNET = "aws:ec2/subnet:Subnet"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
DATASETS = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
EFS = "aws:efs/fileSystem:FileSystem"
EFS_MOUNT = "aws:efs/mountTarget:MountTarget"


def network_pieces(stack: str) -> tuple[Piece, ...]:
    """The network the nodes and the file system share (`network.nodes_network`
    in the AWS stack), named after the cluster's stack as their Name tags are."""
    return (
        Piece(VPC, f"{stack}-vpc", NETWORK_CHAIN, "vpc"),
        Piece(SUBNET, f"{stack}-nodes", NETWORK_CHAIN, "subnet"),
        Piece(SECURITY_GROUP, f"{stack}-eice-sg", NETWORK_CHAIN, "security-group"),
        Piece(SECURITY_GROUP, f"{stack}-sg", NETWORK_CHAIN, "security-group"),
    )


def pieces(plan: Plan) -> tuple[Piece, ...]:
    """Everything the data tier's stack holds, in the order it is created; () without one."""
    if plan.data_stack is None:
        return ()
    stack, shared = plan.stack, plan.shared
    fs = f"{stack}-shared"  # the shared tier's resources are named after this
    if shared.efs is not None:
        tier = (
            Piece(EFS, fs, SHARED_CHAIN, "efs"),
            Piece(EFS_MOUNT, f"{fs}-mount", SHARED_CHAIN, "efs-mount"),
        )
    else:
        tier = (Piece(LUSTRE, fs, SHARED_CHAIN, "fsx"),)
        if shared.fsx.deployment == "PERSISTENT_2" and shared.fsx.import_path:
            tier += (Piece(DATASETS, f"{fs}-datasets", SHARED_CHAIN, "datasets"),)
    return network_pieces(stack) + tier


def former_urns(plan: Plan) -> dict[str, Piece]:
    """Each piece by the URN it had in the cluster's stack before the split."""
    return {p.urn(plan.stack): p for p in pieces(plan)}


def moved_urn(plan: Plan, piece: Piece) -> str:
    """The URN `pulumi state move` gives a piece in the data stack: its former one with the
    stack renamed (the command rewrites the stack and project of a URN, keeps its type chain,
    and puts a resource whose parent stays behind under the destination's root stack: pulumi
    pkg/cmd/pulumi/state/state_move.go, `renameStackAndProject`). The data stack's program
    declares this URN as the piece's alias, so the moved state is taken as the same resource
    (Pulumi docs, "Moving resources between stacks": the destination program then declares
    the resources, with aliases where their parents changed)."""
    return piece.urn(plan.data_stack)
