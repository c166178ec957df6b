"""A training node's instance (rackform/targets/aws/node_instance.py) registers what pulumi_aws's
own `aws.ec2.Instance` registers for the same arguments: the engine's whole request (type, name,
parent, inputs on the wire, their dependencies, options, the provider version) compared field by
field, under the offline plan's mocks (the Pulumi engine cannot run here). Only the outputs the
SDK makes differ, which never reach the engine."""

from __future__ import annotations

import asyncio

import pulumi
import pulumi_aws as aws
import pytest
from google.protobuf.json_format import MessageToDict

from rackform.stack import offline
from rackform.stack.offline import record_program
from rackform.targets.aws.node_instance import TYPE, NodeInstance

# Tag keys a translation of property names could touch: a snake_case and a camelCase one.
TAGS = {"Name": "llm-train-a-prod-gpu-1", "private_ip": "as-is", "instanceType": "as-is"}


async def _state(output: pulumi.Output) -> tuple[bool, object]:
    return await output.is_known(), await output.future()


def _registered(monkeypatch, make, *, replace_first: bool) -> tuple[dict, list]:
    """The engine's request for the node `make` registers, and the private address it read
    (the mocks answer one, as the provider does after `up`: the offline plan's is unknown)."""
    requests: dict[str, dict] = {}
    read: list = []
    register = offline.RecordingMonitor.RegisterResource
    answer = offline.RecordingMocks.new_resource

    def capture(self, request):
        requests[request.name] = MessageToDict(request)
        return register(self, request)

    def created(self, args):
        found, state = answer(self, args)
        return found, {**state, "privateIp": "10.1.2.3"} if args.typ == TYPE else state

    monkeypatch.setattr(offline.RecordingMonitor, "RegisterResource", capture)
    monkeypatch.setattr(offline.RecordingMocks, "new_resource", created)

    def program() -> None:
        group = pulumi.ComponentResource("rackform:aws:NodeGroup", "llm-train-a-prod-gpu")
        below = pulumi.ResourceOptions(parent=group)
        template = aws.ec2.LaunchTemplate("llm-train-a-prod-gpu-lt", opts=below)
        node = make(
            "llm-train-a-prod-gpu-1",
            launch_template={
                "id": template.id,
                "version": template.latest_version.apply(str),
            },
            tags={**TAGS, "rackform:cluster": template.name},
            opts=pulumi.ResourceOptions(parent=group, delete_before_replace=replace_first),
        )
        read.append(asyncio.ensure_future(_state(node.private_ip)))

    record_program(program, "llm-train-a-prod")
    return requests["llm-train-a-prod-gpu-1"], [r.result() for r in read]


@pytest.mark.parametrize("replace_first", [True, False])
def test_the_engine_gets_the_same_request_as_from_the_sdk_class(monkeypatch, replace_first):
    sdk, sdk_read = _registered(monkeypatch, aws.ec2.Instance, replace_first=replace_first)
    ours, our_read = _registered(monkeypatch, NodeInstance, replace_first=replace_first)
    assert ours == sdk
    # What the request carries, so that equal cannot mean empty.
    assert sdk["type"] == "aws:ec2/instance:Instance"
    assert sdk["version"] == aws._utilities.get_version()
    assert sdk["object"]["tags"]["private_ip"] == "as-is"
    assert set(sdk["object"]["launchTemplate"]) == {"id", "version"}
    assert set(sdk["propertyDependencies"]) >= {"launchTemplate", "tags"}
    assert bool(sdk.get("deleteBeforeReplace")) is replace_first
    assert our_read == sdk_read == [(True, "10.1.2.3")]


def test_it_makes_outputs_only_for_what_it_is_given_and_reads():
    outputs: dict[str, list[str]] = {}

    def program() -> None:
        for make in (aws.ec2.Instance, NodeInstance):
            node = make(
                f"n-{make.__name__}",
                launch_template={"id": "lt-1", "version": "1"},
                tags={"Name": "n"},
            )
            outputs[make.__name__] = [
                k for k, v in vars(node).items() if isinstance(v, pulumi.Output)
            ]

    record_program(program, "s")
    assert sorted(outputs["NodeInstance"]) == ["id", "launchTemplate", "privateIp", "tags", "urn"]
    assert len(outputs["Instance"]) > 50  # the SDK class: one for each of the resource's properties
