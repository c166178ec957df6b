"""An autoscaling group's nodes that configure themselves at boot, as `rackform up` waits for
them after the stack's update: a node has passed when its group holds it InService and it tagged
itself `rackform:configured=<sha256>` with the artifact the blueprint pins for its group now
(the node script tags it only once configured and checked, then completes the launch
hook; a node that fails abandons the hook, and Auto Scaling terminates it and launches
another).

Each instance of the group that is not leaving it (terminating, detaching) is judged:

- passed: InService, tagged with the group's pinned artifact;
- stale: tagged with another artifact (configured before the blueprint changed; the group's
  instance refresh replaces it);
- missing: not tagged yet (still in Pending:Wait, configuring itself), or in another state;

and a group running fewer instances than its desired capacity is named too (Auto Scaling has
not launched the rest). moto's server stands in for EC2 and Auto Scaling in
its tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from rackform.blueprint.targets.aws.names import asg_name
from rackform.boot.reports import FAILED, MISSING, NODE_LOG, PASSED, STALE, Judged, NodeResult
from rackform.plan.model import NodeGroupPlan, Plan
from rackform.targets.aws.api import aws_errors, boto3_client, one_line, tags_of

TAG = "rackform:configured"
IN_SERVICE = "InService"
# Lifecycle states of an instance on its way out of the group: not one of its nodes any more.
LEAVING = ("Terminat", "Detach")


class Configured:
    """`client(service, region)`: a boto3 client (moto's server in the tests); `clock` and
    `sleep`: the wait's."""

    def __init__(
        self,
        client: Callable[[str, str], Any] = boto3_client,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._client = client
        self._clock, self._sleep = clock, sleep

    def wait(
        self,
        plan: Plan,
        groups: list[NodeGroupPlan],
        pins: dict[str, str],
        deadline_s: float,
        poll_s: float = 10.0,
    ) -> Judged:
        """Judge `groups` (their pinned artifacts: `pins`, group -> sha256) every `poll_s`
        until every node passed or `deadline_s` passes. An AWS API error ends the wait at
        once, each group that could not be read named as failed."""
        start = self._clock()
        while True:
            waited = self._clock() - start
            nodes, pinned, broken = self.judge(plan, groups, pins, waited)
            judged = Judged(pinned, tuple(nodes), waited)
            if judged.validated or broken or waited >= deadline_s:
                return judged
            self._sleep(max(0.0, min(poll_s, deadline_s - waited)))

    def judge(
        self, plan: Plan, groups: Iterable[NodeGroupPlan], pins: dict[str, str], waited: float
    ) -> tuple[list[NodeResult], dict[str, str], bool]:
        """Each group's nodes as they are now, each node's pinned artifact, and whether a group
        could not be read."""
        nodes: list[NodeResult] = []
        pinned: dict[str, str] = {}
        broken = False
        for g in groups:
            name = asg_name(plan, g)
            try:
                found = self._group(plan, name)
            except aws_errors() as exc:
                broken = True
                line = (
                    f"{name}: its instances could not be read ({one_line(exc)}): fix the AWS "
                    "credentials or the network, then run `rackform up` again"
                )
                nodes.append(NodeResult(name, FAILED, line))
                pinned[name] = pins[g.name]
                continue
            for result in self._judged(plan, name, g, found, pins[g.name], waited):
                nodes.append(result)
                pinned[result.node] = pins[g.name]
        return nodes, pinned, broken

    def _group(self, plan: Plan, name: str) -> dict[str, Any] | None:
        """The group and its instances' EC2 records (by id), or None where it does not exist."""
        region = plan.target.region
        answer = self._client("autoscaling", region).describe_auto_scaling_groups(
            AutoScalingGroupNames=[name]
        )
        found = [g for g in answer["AutoScalingGroups"] if g["AutoScalingGroupName"] == name]
        if not found:
            return None
        group = found[0]
        ids = [i["InstanceId"] for i in group.get("Instances", [])]
        records: dict[str, dict] = {}
        if ids:
            pages = (
                self._client("ec2", region)
                .get_paginator("describe_instances")
                .paginate(InstanceIds=ids)
            )
            records = {
                i["InstanceId"]: i
                for page in pages
                for r in page["Reservations"]
                for i in r["Instances"]
            }
        return {"group": group, "records": records}

    def _judged(
        self,
        plan: Plan,
        name: str,
        g: NodeGroupPlan,
        found: dict[str, Any] | None,
        sha: str,
        waited: float,
    ) -> list[NodeResult]:
        if found is None:
            return [
                NodeResult(
                    name,
                    MISSING,
                    f"{name}: no such Auto Scaling group in {plan.target.region} (node group "
                    f"{g.name}): run `rackform up` again, which creates it",
                )
            ]
        group, records = found["group"], found["records"]
        members = [
            i
            for i in sorted(group.get("Instances", []), key=lambda i: i["InstanceId"])
            if not i.get("LifecycleState", "").startswith(LEAVING)
        ]
        out = [_one(i, records.get(i["InstanceId"], {}), g.name, sha, waited) for i in members]
        desired = int(group.get("DesiredCapacity", 0))
        if len(members) < desired:
            out.append(
                NodeResult(
                    f"{name}[{len(members)}/{desired}]",
                    MISSING,
                    f"{name}: {len(members)} of its {desired} desired instances are running: Auto "
                    "Scaling has not launched the others (capacity, quota or a failed launch: "
                    f"`aws autoscaling describe-scaling-activities --auto-scaling-group-name "
                    f"{name}`); run `rackform up` again once it has",
                )
            )
        return out


def _one(member: dict, record: dict, group: str, sha: str, waited: float) -> NodeResult:
    iid = member["InstanceId"]
    state = member.get("LifecycleState", "?")
    who = f"{iid} ({record.get('PrivateIpAddress') or 'no address'}, node group {group})"
    tag = tags_of(record).get(TAG)
    if tag == sha and state == IN_SERVICE:
        return NodeResult(iid, PASSED, "")
    if tag and tag != sha:
        return NodeResult(
            iid,
            STALE,
            f"{who}: WARNING: configured with artifact {tag[:12]}, not the blueprint's "
            f"{sha[:12]} (launched before the blueprint changed): not validated; its group's "
            "instance refresh replaces it: run `rackform up` again once it has, or replace it "
            "(`rackform heal`, or terminate it: the group launches another)",
        )
    return NodeResult(
        iid,
        MISSING,
        f"{who}: not configured after {waited:.0f} s ({state}): it is still configuring itself, "
        f"or its bootstrap stopped; read {NODE_LOG} on it (`aws ssm start-session --target "
        f"{iid}`) or its console (`aws ec2 get-console-output --instance-id {iid}`), then run "
        "`rackform up` again (a node whose checks fail abandons its launch, and the group "
        "launches another)",
    )
