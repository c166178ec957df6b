"""What the offline plan's mocks answer for pulumi-aws: the outputs AWS computes when it creates
a resource, the ones a real preview leaves unknown, and the two data sources the stack reads
(the AMI lookup, an autoscaling group's instances)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rackform.plan.targets.offline import UNKNOWN, OfflineAnswers


def _ami(args: Mapping[str, Any]) -> dict[str, Any]:
    names = [f["values"][0] for f in args.get("filters", []) if f["name"] == "name"]
    owners = ",".join(args.get("owners") or [])
    image = f"<newest AMI named {names[0]!r} owned by {owners}>" if names else UNKNOWN
    return {"id": image, "imageId": image}


def _instances(args: Mapping[str, Any]) -> dict[str, Any]:
    # Reached only when the group's name is known, i.e. the group exists already.
    return {"ids": [], "privateIps": [], "publicIps": []}


ANSWERS = OfflineAnswers(
    # What FSx for Lustre and EFS give the nodes to mount (DNS and mount names).
    computed={
        "aws:fsx/lustreFileSystem:LustreFileSystem": ("dnsName", "mountName"),
        "aws:efs/fileSystem:FileSystem": ("dnsName",),
        # Slurm's topology as EC2 placed the instances (DescribeInstanceTopology, read at `up`).
        "pulumi-python:dynamic/rackform:InstanceTopology": (
            "slurm_switches",
            "slurm_blocks",
            "slurm_topology_plugin",
            "slurm_topology_conf",
            "slurm_topology_yaml",
        ),
    },
    # The instances' addresses, and the name of a new autoscaling group (so the lookup of its
    # instances stays unknown too, as it would before `up`).
    unknown={
        "aws:ec2/instance:Instance": ("privateIp", "publicIp"),
        "aws:autoscaling/group:Group": ("name",),
        # The AMI a node image's build makes (the launch templates' image): known after it.
        "aws:imagebuilder/image:Image": ("outputResources",),
    },
    calls={
        "aws:ec2/getAmi:getAmi": _ami,
        "aws:ec2/getInstances:getInstances": _instances,
    },
)
