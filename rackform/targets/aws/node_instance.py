"""A training node's EC2 instance: the provider's own `aws:ec2/instance:Instance`, registered
with the inputs rackform gives it and only the outputs rackform reads.

pulumi_aws's `aws.ec2.Instance` declares every one of the resource's 61 properties to the SDK,
which makes an output (and its futures and asyncio tasks) for each of them whatever the
program reads: at 4,096 training nodes that was 250,000 outputs, about 5 s of the offline
plan's CPU and the same in every `pulumi preview` and `up` of the program. The engine, the
provider and the stack's state see the same resource either way: the same type token, name,
parent and options, the same inputs on the wire, the provider version the SDK class asks for;
the provider returns its whole state and the engine keeps it, while the SDK ignores returned
properties the program did not declare (pulumi/runtime/rpc.py `resolve_properties`).
A test holds the registration equal to the SDK class's.
"""

from __future__ import annotations

import pulumi
from pulumi_aws import _utilities

TYPE = "aws:ec2/instance:Instance"


class NodeInstance(pulumi.CustomResource):
    """An instance launched from a launch template, with its own tags. Its properties keep
    their wire names (the SDK's default translation, none, also leaves the tags' keys alone);
    the one output read is `private_ip`."""

    def __init__(
        self,
        name: str,
        *,
        launch_template: pulumi.Input[dict],
        tags: pulumi.Input[dict[str, str]],
        opts: pulumi.ResourceOptions | None = None,
    ):
        # The provider version (and download URL) pulumi_aws's classes pin on each resource,
        # so the instances share the stack's default aws provider with the rest.
        opts = pulumi.ResourceOptions.merge(_utilities.get_resource_opts_defaults(), opts)
        props = {"launchTemplate": launch_template, "tags": tags, "privateIp": None}
        super().__init__(TYPE, name, props, opts)

    @property
    def private_ip(self) -> pulumi.Output[str]:
        return self.__dict__["privateIp"]
