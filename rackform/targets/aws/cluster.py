"""A cluster on AWS: network (with the controller's Instance Connect Endpoint; where the blueprint
keeps a file system, its VPC, subnet and security groups are read from the data tier's own stack),
the stack's key material, node identity (IAM role and instance profile), the machine image (pinned,
and baked into a node image where the blueprint says so), a cluster placement group for training,
the bootstrap artifacts of groups that configure themselves, one AwsNodeGroup per node group, and
Slurm's controller instance where the blueprint has a scheduler."""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from rackform.blueprint.targets.aws.names import asg_name
from rackform.boot.artifact import user_data
from rackform.plan.model import Plan
from rackform.stack.outputs import applied
from rackform.targets.aws.access import NodeKeys, access
from rackform.targets.aws.bootstrap import ArtifactBucket, group_artifact, node_policy
from rackform.targets.aws.controller import SlurmController
from rackform.targets.aws.data_tier import HeldDataTier
from rackform.targets.aws.image_pin import ImagePin
from rackform.targets.aws.network import AwsNetwork
from rackform.targets.aws.node_image import NodeImage
from rackform.targets.aws.nodes import AwsNodeGroup
from rackform.targets.aws.shared import AwsSharedStorage
from rackform.targets.aws.tags import aws_tags
from rackform.targets.aws.tier import on_aws, tier_policy
from rackform.targets.aws.topology import TOPOLOGY_VARS, InstanceTopology

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

    nodes: pulumi.Output  # {node group: [[name, address, port, instance id], ...]}
    slurm_controller: pulumi.Output | None  # Slurm's controller, [name, address, port, instance id]
    node_resources: list[pulumi.Resource]

    def __init__(self, name: str, plan: Plan, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rackform:aws:Cluster", name, None, opts)
        target, tp = plan.target, plan.target_plan
        child = pulumi.ResourceOptions(parent=self)
        name = plan.stack  # children are named after the cluster, as their Name tags are
        # Groups whose nodes configure themselves at boot (compile.py says which).
        joining = [g for g in plan.node_groups if g.configured == "boot"]
        # Joining nodes and the node image's builder fetch their artifact from S3, and jobs copy
        # checkpoints to an S3 tier.
        s3 = bool(joining) or plan.baked or on_aws(plan.object_tier)
        # A kept file system lives in the data tier's own stack with the network it sits in
        # (data_tier.py): read from there, and everything else created in its VPC.
        held = HeldDataTier(plan, self) if plan.data_stack else None
        self.network = AwsNetwork(
            f"{name}-network",
            plan,
            s3_endpoint=s3,
            held=held.network if held else None,
            opts=child,
        )
        self.keys = NodeKeys(f"{name}-keys", plan.stack, opts=child)
        self.access = access(self.keys)

        role = aws.iam.Role(
            f"{name}-node-role",
            description=f"rackform {plan.stack} GPU nodes (SSM)",
            assume_role_policy=assume_role_policy(),
            tags=aws_tags(plan, f"{name}-node-role"),
            opts=child,
        )
        # SSM gives people a shell and a command channel without any port (a second way in;
        # the controller uses SSH through the Instance Connect Endpoint).
        aws.iam.RolePolicyAttachment(
            f"{name}-node-ssm",
            role=role.name,
            policy_arn=f"arn:{tp.partition}:iam::aws:{SSM_POLICY}",
            opts=child,
        )
        if joining:
            aws.iam.RolePolicy(
                f"{name}-node-join",
                role=role.id,
                policy=node_policy(
                    tp.partition, target.region, [asg_name(plan, g) for g in joining]
                ),
                opts=child,
            )
        if on_aws(plan.object_tier):
            aws.iam.RolePolicy(
                f"{name}-node-checkpoints",
                role=role.id,
                policy=tier_policy(tp.partition, plan.object_tier),
                opts=child,
            )
        profile = aws.iam.InstanceProfile(
            f"{name}-node-profile",
            role=role.name,
            tags=aws_tags(plan, f"{name}-node-profile"),
            opts=child,
        )

        # One pinned image per CPU architecture the node groups run (arm64 for Grace): x86_64's
        # keeps the name it always had, so a stack of x86_64 nodes is as it was.
        amis = {
            arch: self._image(name, plan, arch, child)
            for arch in dict.fromkeys(g.instance.arch for g in plan.node_groups)
        }
        ami = amis.get("x86_64")

        placement: pulumi.Input[str] | None = tp.existing_placement_group
        if tp.placement_group:
            placement = aws.ec2.PlacementGroup(
                f"{name}-pg",
                strategy="cluster",
                tags=aws_tags(plan, f"{name}-pg"),
                opts=child,
            ).name

        self.shared: AwsSharedStorage | HeldDataTier | None = held
        if held is None and plan.shared is not None and plan.shared.kind in ("fsx", "efs"):
            self.shared = AwsSharedStorage(
                f"{name}-shared", plan, self.network.subnet, self.network.security_group, opts=child
            )
        # The shared_storage role's variables only the file system knows (stack/cluster.py).
        self.role_outputs = self.shared.role_vars() if self.shared else {}

        bucket = None
        if joining or plan.baked:
            bucket = ArtifactBucket(f"{name}-bootstrap", plan, self.network.s3_endpoint, opts=child)
        self.node_image = None
        if bucket is not None and plan.baked:
            # The nodes launch from the image baked on the pinned one (node_image.py): its AMI
            # is an output of the build, so no launch template changes before the build succeeds.
            self.node_image = NodeImage(
                f"{name}-node-image",
                plan,
                base=ami,
                bucket=bucket,
                network=self.network,
                assume_role_policy=assume_role_policy(),
                opts=child,
            )
            ami = self.node_image.ami
            amis["x86_64"] = ami  # the schema refuses a baked image beside arm64 groups

        self.groups = []
        for g in plan.node_groups:
            sha, url = None, ""
            if bucket is not None and g.configured == "boot":
                artifact = group_artifact(plan, g, asg_name(plan, g))
                sha, url = artifact.sha256, bucket.publish(g.name, artifact)
            data = pulumi.Output.all(
                self.keys.client_public_key,
                self.keys.host_private_key,
                self.keys.host_public_key,
                url,
            ).apply(lambda k, sha=sha: self._user_data(plan, *k, sha=sha))
            self.groups.append(
                AwsNodeGroup(
                    f"{name}-{g.name}",
                    plan,
                    g,
                    ami=amis[g.instance.arch],
                    subnet=self.network.subnet,
                    security_group=self.network.security_group,
                    instance_profile=profile,
                    placement_group=placement,
                    user_data=data,
                    artifact_sha=sha,
                    opts=child,
                )
            )
        self.node_resources = [r for g in self.groups for r in g.resources]
        names = [g.name for g in plan.node_groups]
        # `applied`, not Output.all: no copy of every group's node list (stack/outputs.py).
        self.nodes = applied(
            lambda *lists: dict(zip(names, lists, strict=True)), *[g.nodes for g in self.groups]
        )
        # Slurm's topology from the placement AWS gave the instances, read after they exist: it
        # replaces the plan's (one leaf, or the plan's blocks) before Configure writes it.
        self.topology = None
        if plan.scheduler is not None and plan.purpose == "training":
            self.topology = InstanceTopology(
                f"{name}-topology",
                target.region,
                applied(
                    lambda nodes: {n[0]: n[3] for group in nodes.values() for n in group},
                    self.nodes,
                ),
                # The node instances (a copy: the controller joins the list below).
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(self.node_resources)),
            )
            self.role_outputs = {
                **self.role_outputs,
                # topology.conf as the one renderer writes it from EC2's answer, over the plan's.
                **{k: getattr(self.topology, k) for k in TOPOLOGY_VARS},
            }
        # Slurm's controller, where the blueprint declares a scheduler: no node (not in
        # `nodes`, so nothing that reads the GPU nodes sees it), but configured with them.
        self.slurm_controller: pulumi.Output | None = None
        instance = plan.scheduler.instance if plan.scheduler else None
        if instance is not None:
            data = pulumi.Output.all(
                self.keys.client_public_key, self.keys.host_private_key, self.keys.host_public_key
            ).apply(lambda k: self._user_data(plan, *k))
            ctl = SlurmController(
                f"{name}-slurm",
                plan,
                instance,
                subnet=self.network.subnet,
                security_group=self.network.security_group,
                instance_profile=profile,
                user_data=data,
                opts=child,
            )
            self.slurm_controller = ctl.node
            self.node_resources.append(ctl.instance)
        self.register_outputs(
            {
                "nodes": self.nodes,
                **({"slurm_controller": self.slurm_controller} if self.slurm_controller else {}),
                **({"shared_file_system": self.shared.file_system_id} if self.shared else {}),
                **({"node_image": self.node_image.ami} if self.node_image else {}),
                **(
                    {
                        "slurm_switches": self.topology.slurm_switches,
                        "slurm_blocks": self.topology.slurm_blocks,
                    }
                    if self.topology
                    else {}
                ),
                "vpc_id": self.network.vpc.id,
                "instance_connect_endpoint": self.network.endpoint.id,
            }
        )

    def _image(self, name: str, plan: Plan, arch: str, child) -> pulumi.Output:
        """The image the nodes of `arch` boot: the blueprint's explicit id, or the newest of its
        kind built for `arch`, pinned at the first `up`: a newer image of the kind never
        replaces running nodes, a new kind or id replaces them, planned (`ImagePin`)."""
        target, image = plan.target, plan.target_plan.image
        if target.ami.id:
            lookup: pulumi.Input[str] = target.ami.id
        else:
            lookup = aws.ec2.get_ami_output(
                most_recent=True,
                owners=[image.owner],
                filters=[
                    {"name": "name", "values": [image.name_filter_for(arch)]},
                    {"name": "architecture", "values": [arch]},
                    {"name": "state", "values": ["available"]},
                ],
                opts=pulumi.InvokeOutputOptions(parent=self),
            ).id
        pin = f"{name}-image" if arch == "x86_64" else f"{name}-image-{arch}"
        return ImagePin(pin, target.ami.id or image.key, lookup, opts=child).image_id

    @staticmethod
    def _user_data(
        plan: Plan,
        client_public: str | None,
        host_private: str | None,
        host_public: str | None,
        url: str = "",
        sha: str | None = None,
    ) -> str | None:
        if not (client_public and host_private and host_public):
            return None  # known after up (the keys are made by the stack)
        return user_data(
            ssh_user=plan.ssh_user,
            authorized_key=client_public,
            host_private_key=host_private,
            host_public_key=host_public,
            artifact_url=url,
            artifact_sha256=sha or "",
        )
