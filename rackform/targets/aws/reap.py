"""`rackform reap` on AWS: the cluster's live tags and launch times from EC2, and its idle
actions (rackform/targets/aws/idle.py says what each one means and why it leaves no drift).

boto3 is imported where it is used (the deploy extra); tests hand in botocore-stubbed clients,
since AWS cannot be reached from the test machines."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from rackform.plan.model import Plan
from rackform.reap.target import Live, Outcome

LIVE_STATES = ["pending", "running", "stopping", "stopped"]
PROTECT_TAG = "rackform:protect"


def _filters(plan: Plan) -> list[dict[str, Any]]:
    tags = plan.tag_map
    return [
        {"Name": f"tag:{k}", "Values": [tags[k]]}
        for k in ("rackform:cluster", "rackform:environment")
    ]


def _boto3_client(service: str, region: str):
    try:
        import boto3
    except ImportError:
        raise RuntimeError(
            "reap on AWS needs boto3, from the deploy extra (pip install 'rackform[deploy]')"
        ) from None
    return boto3.client(service, region_name=region)


class AwsReaper:
    def __init__(self, client: Callable[[str, str], Any] = _boto3_client):
        self._client = client

    def _instances(self, plan: Plan) -> list[dict]:
        ec2 = self._client("ec2", plan.target.region)
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[*_filters(plan), {"Name": "instance-state-name", "Values": LIVE_STATES}]
        )
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def live(self, plan: Plan) -> Live:
        """Protected when any instance of the cluster is tagged rackform:protect=true now (a
        person can set that in the console, without a commit)."""
        try:
            found = self._instances(plan)
        except Exception as exc:  # botocore's many error types: credentials, API, network
            return Live(error=f"cannot read the cluster's live tags from EC2: {_why(exc)}")
        tagged = [
            i["InstanceId"]
            for i in found
            if any(t["Key"] == PROTECT_TAG and t["Value"] == "true" for t in i.get("Tags", []))
        ]
        started = min((i["LaunchTime"].timestamp() for i in found), default=None)
        detail = f"{len(found)} instances in EC2"
        if tagged:
            detail += f"; {PROTECT_TAG}=true on " + ", ".join(sorted(tagged))
        return Live(protected=bool(tagged), started=started, detail=detail)

    def act(self, plan: Plan, action: str) -> list[Outcome]:
        try:
            if action == "destroy":
                return [_destroy(plan)]
            if action == "stop":
                return self._stop(plan)
            if action == "scale-to-zero":
                return self._scale_to_zero(plan)
        except Exception as exc:
            return [Outcome(plan.stack, False, _why(exc))]
        raise ValueError(f"{action} is not an AWS idle action")

    def _stop(self, plan: Plan) -> list[Outcome]:
        ids = sorted(
            i["InstanceId"] for i in self._instances(plan) if i["State"]["Name"] != "stopped"
        )
        if not ids:
            return [Outcome(plan.stack, True, "no running instances")]
        ec2 = self._client("ec2", plan.target.region)
        answer = ec2.stop_instances(InstanceIds=ids)
        return [
            Outcome(
                s["InstanceId"],
                True,
                f"{s['PreviousState']['Name']} -> {s['CurrentState']['Name']}",
            )
            for s in answer["StoppingInstances"]
        ]

    def _scale_to_zero(self, plan: Plan) -> list[Outcome]:
        asg = self._client("autoscaling", plan.target.region)
        groups = asg.describe_auto_scaling_groups(Filters=_filters(plan))["AutoScalingGroups"]
        if not groups:
            return [Outcome(plan.stack, False, "no autoscaling group carries the cluster's tags")]
        out = []
        for g in groups:
            asg.update_auto_scaling_group(
                AutoScalingGroupName=g["AutoScalingGroupName"], MinSize=0, DesiredCapacity=0
            )
            out.append(
                Outcome(g["AutoScalingGroupName"], True, f"desired {g['DesiredCapacity']} -> 0")
            )
        return out


def _destroy(plan: Plan) -> Outcome:
    """`pulumi destroy` of the stack, through the Automation API (the real CLI on PATH)."""
    from rackform.stack.workspace import WorkspaceError, open_stack, run

    try:
        stack = open_stack(plan, plan.project)
    except WorkspaceError as exc:
        return Outcome(plan.stack, False, str(exc))
    lines: list[str] = []
    code = run(
        stack, "destroy", on_output=lines.append, on_error=lambda x: print(x, file=sys.stderr)
    )
    if code:
        return Outcome(plan.stack, False, f"pulumi destroy exited {code}")
    return Outcome(plan.stack, True, "stack destroyed")


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
