"""The Slurm controller of an AWS training cluster: one small instance beside the nodes that runs
slurmctld only (no slurmd, no GPU, in no partition). The nodes are the stack's own, so none of
them exists before `up` to be named the controller; and a GPU node that also ran slurmctld
would take the queue down whenever it is replaced or reclaimed (spot).

It sits where the nodes sit and is reached the way they are: the nodes' private subnet, no
public address, the nodes' security group, the stack's SSH keys in its user data (so Ansible
reaches it through the stack's EC2 Instance Connect Endpoint, and it presents the host key the
nodes present). The group admits every protocol between its members, which is what Slurm
needs between slurmctld and the nodes: slurmctld listens on 6817 (SlurmctldPort), slurmd on
6818 (SlurmdPort), and srun on ephemeral ports the nodes' slurmstepd connect back to (Slurm's
"Network Configuration Guide", https://slurm.schedmd.com/network.html).

Bought on demand whatever the nodes' market: slurmctld holds the queue, and a reclaimed
controller would take every job's scheduling with it. Outside the cluster placement group (it
needs no EFA, and a placement group sized for the GPU nodes or a reservation has no room for
it). Its image is Canonical's Ubuntu 24.04 whatever the nodes run (a controller has no use for
a GPU image, and the slurm role needs Slurm 22.05 or newer), pinned like the nodes' image."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from rackform.blueprint.targets.aws.images import CONTROLLER_IMAGE
from rackform.plan.model import Plan
from rackform.plan.slurm import CONTROLLER_TAG, ControllerInstance
from rackform.targets.aws.image_pin import ImagePin
from rackform.targets.aws.nodes import SSH_PORT
from rackform.targets.aws.tags import aws_tags

IMAGE = CONTROLLER_IMAGE
# Canonical's Ubuntu images come with an 8 GiB root ("Find Ubuntu images on AWS"); slurmctld's
# state (StateSaveLocation) and logs live on it, so it gets more.
ROOT_GB = 30


class SlurmController(pulumi.ComponentResource):
    """The controller instance; `node` is [name, private address, ssh port, instance id], the
    shape of a node in the node groups' output."""

    node: pulumi.Output
    instance: aws.ec2.Instance

    def __init__(
        self,
        name: str,
        plan: Plan,
        spec: ControllerInstance,
        *,
        subnet: aws.ec2.Subnet,
        security_group: aws.ec2.SecurityGroup,
        instance_profile: aws.iam.InstanceProfile,
        user_data: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("rackform:aws:SlurmController", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        lookup = aws.ec2.get_ami_output(
            most_recent=True,
            owners=[IMAGE.owner],
            filters=[
                {"name": "name", "values": [IMAGE.name_filter]},
                {"name": "architecture", "values": ["x86_64"]},
                {"name": "state", "values": ["available"]},
            ],
            opts=pulumi.InvokeOutputOptions(parent=self),
        ).id
        # Pinned at the first `up`, as the nodes' image is: a newer Ubuntu 24.04 never replaces
        # the running controller (`ImagePin`).
        ami = ImagePin(f"{name}-image", IMAGE.key, lookup, opts=child).image_id
        tags = {**aws_tags(plan, spec.name), CONTROLLER_TAG[0]: CONTROLLER_TAG[1]}
        self.instance = aws.ec2.Instance(
            spec.name,
            ami=ami,
            # Updated in place (stop, modify, start), never a replacement: the provider's
            # aws_instance `instance_type` is not ForceNew (the compiler's replace rules).
            # The GPU nodes take none of the controller's inputs, so they never follow it.
            instance_type=spec.instance_type,
            subnet_id=subnet.id,
            vpc_security_group_ids=[security_group.id],
            # Private only: reached through the Instance Connect Endpoint, like the nodes.
            associate_public_ip_address=False,
            iam_instance_profile=instance_profile.name,
            key_name=plan.target.key_name,
            metadata_options={
                "http_endpoint": "enabled",
                "http_tokens": "required",  # IMDSv2 only
                # Nothing on the controller runs in a container: one hop (the instance itself).
                "http_put_response_hop_limit": 1,
            },
            root_block_device={
                "volume_size": ROOT_GB,
                "volume_type": "gp3",
                "encrypted": True,
                "delete_on_termination": True,
                "tags": tags,
            },
            # The same cloud-init as the nodes': the stack's client key authorised, its host key
            # installed. A change updates the instance in place (the provider's
            # `user_data_replace_on_change` defaults to false); the keys change only with the
            # cluster's name.
            user_data=user_data,
            tags=tags,
            opts=child,
        )
        self.node = pulumi.Output.all(self.instance.private_ip, self.instance.id).apply(
            lambda pair: [spec.name, pair[0], SSH_PORT, pair[1]]
        )
        self.register_outputs({"node": self.node})
