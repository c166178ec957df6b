"""A stack's instances by name, for the commands that run after `up` (reap, heal, rolling
changes, jobs, status): reached over SSH through the stack's EC2 Instance Connect Endpoint, or
given up for a new one (heal's `replace`).

A name is what the plan and Slurm call the host: a training node `{stack}-{group}-{i}` and the
controller `{stack}-slurmctld` (their `Name` tags, from the AWS target's `names`), or an
instance id (a serving group's nodes, named by their ids in the stack's outputs). Only running
instances carrying the cluster's `rackform:cluster` and `rackform:environment` tags count, so
`llm-train-a` never reaches `llm-train-a2`'s hosts, and a name two running instances carry is
refused rather than guessed.

The key and known_hosts file are the stack's (its `ssh_access` output: `pulumi stack output
ssh_access --show-secrets`), given to a command as --private-key and --known-hosts. moto's server
stands in for EC2 and Auto Scaling in its tests; the tunnel itself (the AWS CLI's `open-tunnel`) is
not yet run against AWS."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from typing import Any

from rackform.blueprint.schema import names
from rackform.blueprint.targets.aws.images import CONTROLLER_IMAGE
from rackform.blueprint.targets.aws.names import CONTROLLER_SUFFIX, asg_name, node_names
from rackform.lifecycle.outcome import ActionError
from rackform.plan.model import Plan
from rackform.scheduler.remote import RemoteError, Ssh
from rackform.targets.aws.api import aws_errors, boto3_client, cluster_filters, one_line, tags_of

SSH_PORT = 22
RELEASED = "terminated"


def tunnel(region: str, instance_id: str) -> str:
    """ssh's ProxyCommand through the stack's endpoint: the AWS CLI v2 opens a WebSocket to the
    EC2 Instance Connect Endpoint and relays the connection over its stdin and stdout (EC2 user
    guide, "Connect to an instance using EC2 Instance Connect Endpoint": `aws
    ec2-instance-connect open-tunnel --instance-id ID`, used as ProxyCommand). ssh runs it
    through a shell, and the id is EC2's answer: an id that is none is refused (UnsafeValue)
    rather than quoted, as ssh would expand a `%` in it before any shell saw it."""
    instance_id = names.instance_id(instance_id, "EC2")
    words = ["aws", "ec2-instance-connect", "open-tunnel", "--region", region]
    return shlex.join([*words, "--instance-id", instance_id])


class Instances:
    """`client(service, region)`: a boto3 client (moto's server in the tests); `sleep`, `clock`
    and `timeout_s`: how long `replace` waits for the old instance to be gone."""

    def __init__(
        self,
        client: Callable[[str, str], Any] = boto3_client,
        *,
        timeout_s: float = 600.0,
        poll_s: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._client = client
        self.timeout_s, self.poll_s = timeout_s, poll_s
        self._sleep, self._clock = sleep, clock

    def find(self, plan: Plan, name: str) -> dict:
        """The cluster's one running instance called `name` (its Name tag, else its id)."""
        found: list[dict] = []
        for by in ("tag:Name", "instance-id"):
            if by == "instance-id" and not name.startswith("i-"):
                break
            found = self._running(plan, {"Name": by, "Values": [name]})
            if found:
                break
        if not found:
            raise LookupError(
                f"no running instance {name!r} of cluster {plan.name} ({plan.environment}) in "
                f"{plan.target.region}"
            )
        if len(found) > 1:
            ids = ", ".join(sorted(i["InstanceId"] for i in found))
            raise LookupError(f"{len(found)} running instances are called {name!r}: {ids}")
        return found[0]

    def nodes(self, plan: Plan) -> dict[str, list[list]]:
        """The cluster's running nodes as the stack's `nodes` output names them: node group ->
        [[name, private address, ssh port, instance id]] (a training group's by the names the
        plan gave them, a serving group's by its instances' ids)."""
        try:
            running = self._running(plan)
        except aws_errors() as exc:
            raise ActionError(f"cannot read the cluster's instances: {one_line(exc)}") from None
        by_name: dict[str, dict] = {}
        for i in running:
            tags = tags_of(i)
            if "aws:autoscaling:groupName" in tags:
                continue  # a group's instances share its Name: they go by their ids
            name = tags.get("Name", "")
            if name in by_name:  # never guess which of two is the node
                ids = f"{by_name[name]['InstanceId']}, {i['InstanceId']}"
                raise ActionError(f"2 running instances are called {name!r}: {ids}")
            by_name[name] = i
        out: dict[str, list[list]] = {}
        for g in plan.node_groups:
            asg = asg_name(plan, g)
            members = [i for i in running if tags_of(i).get("aws:autoscaling:groupName") == asg]
            named = [(i["InstanceId"], i) for i in members] or [
                (n, by_name[n]) for n in node_names(plan.stack, g.name, g.count) if n in by_name
            ]
            out[g.name] = [
                [n, i["PrivateIpAddress"], SSH_PORT, i["InstanceId"]] for n, i in sorted(named)
            ]
        return out

    def _running(self, plan: Plan, *extra: dict) -> list[dict]:
        """The cluster's running instances (with `extra` filters)."""
        running = {"Name": "instance-state-name", "Values": ["running"]}
        pages = (
            self._client("ec2", plan.target.region)
            .get_paginator("describe_instances")
            .paginate(Filters=[*cluster_filters(plan), running, *extra])
        )
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def reach(self, plan: Plan, name: str, identity=None, known_hosts=None) -> Ssh:
        """`name` over SSH through the stack's endpoint, as its image's user."""
        try:
            inst = self.find(plan, name)
        except LookupError as exc:
            raise RemoteError(str(exc)) from None
        except aws_errors() as exc:
            raise RemoteError(f"cannot look {name} up in EC2: {one_line(exc)}") from None
        controller = name.endswith(f"-{CONTROLLER_SUFFIX}")
        user = CONTROLLER_IMAGE.ssh_user if controller else plan.ssh_user
        source = f"EC2 (instance {name!r})"
        try:
            address = names.node_address(inst.get("PrivateIpAddress"), source)
            proxy = tunnel(plan.target.region, names.instance_id(inst.get("InstanceId"), source))
        except names.UnsafeValue as exc:
            raise RemoteError(str(exc)) from None
        return Ssh(
            user,
            address,
            SSH_PORT,
            None if identity is None else str(identity),
            None if known_hosts is None else str(known_hosts),
            proxy,
        )

    def replace(self, plan: Plan, name: str) -> str:
        """Terminate `name`'s instance and wait until it is gone, so capacity held for the
        cluster (a placement group, a capacity reservation or block) is free before its
        successor launches. A serving group's instance is terminated through its group without
        lowering the desired capacity, and the group launches the successor (Auto Scaling API,
        TerminateInstanceInAutoScalingGroup, ShouldDecrementDesiredCapacity=false; when, the
        group's instance maintenance policy decides, not yet seen on AWS); a training
        node is the stack's own, launched again by `rackform up --refresh` (a refresh reads the
        instance as gone: the AWS provider drops a terminated instance from the state, and the
        update creates it anew)."""
        region = plan.target.region
        try:
            inst = self.find(plan, name)
            iid = inst["InstanceId"]
            group = tags_of(inst).get("aws:autoscaling:groupName")
            if group:
                self._client("autoscaling", region).terminate_instance_in_auto_scaling_group(
                    InstanceId=iid, ShouldDecrementDesiredCapacity=False
                )
            else:
                self._client("ec2", region).terminate_instances(InstanceIds=[iid])
            self._gone(plan, iid)
        except LookupError as exc:
            raise ActionError(str(exc)) from None
        except aws_errors() as exc:
            raise ActionError(f"replace {name}: {one_line(exc)}") from None
        if group:
            return f"{iid} terminated; its group {group} launches the successor"
        return (
            f"{iid} terminated, its capacity released; `rackform up --refresh` launches its "
            f"successor as {name}"
        )

    def _gone(self, plan: Plan, iid: str) -> None:
        ec2 = self._client("ec2", plan.target.region)
        end = self._clock() + self.timeout_s
        while True:
            out = ec2.describe_instances(InstanceIds=[iid])
            states = [i["State"]["Name"] for r in out["Reservations"] for i in r["Instances"]]
            if states and all(s == RELEASED for s in states):
                return
            if self._clock() >= end:
                raise ActionError(
                    f"{iid} is still {'/'.join(states) or 'unknown'} {self.timeout_s:g} s after "
                    "it was terminated"
                )
            self._sleep(self.poll_s)
