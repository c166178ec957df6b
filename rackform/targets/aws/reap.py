"""`rackform reap` on AWS: the cluster's live state from EC2 and Auto Scaling (tags, instance
state, launch times, group sizes), its idle actions, and snoozes written as tags
(the AWS target's idle schema says what each action means and why it leaves no drift).

Everything is found by the cluster's tags (rackform:cluster and rackform:environment, both exact
values), never by a name prefix, so `llm-train-a` never reaches `llm-train-a2`'s instances.

boto3 is imported where it is used (the deploy extra). It is tested
against moto's server on loopback, since AWS cannot be reached from the test machines."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from rackform.lifecycle.outcome import Outcome
from rackform.plan.model import Plan
from rackform.reap.snooze import iso
from rackform.reap.target import Live
from rackform.targets.aws.api import (
    aws_errors,
    boto3_client,
    cluster_filters,
    one_line,
    tags_of,
)

LIVE_STATES = ["pending", "running", "stopping", "stopped"]
PROTECT_TAG = "rackform:protect"
SNOOZE_UNTIL_TAG = "rackform:snooze-until"
SNOOZE_REASON_TAG = "rackform:snooze-reason"
SNOOZE_EXAMPLE = "2026-11-25T18:00:00Z"
# The longest tag value EC2 and Auto Scaling accept (256 Unicode characters).
TAG_VALUE_MAX = 256


class AwsReaper:
    """`timeout_s` / `poll_s`: how long `stop` waits for every instance to report `stopped`, and
    how often it asks. `sleep` and `clock` are time.sleep and time.monotonic but for tests."""

    def __init__(
        self,
        client: Callable[[str, str], Any] = boto3_client,
        *,
        timeout_s: float = 600.0,
        poll_s: float = 15.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._factory = client
        self._clients: dict[tuple[str, str], Any] = {}
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._sleep = sleep
        self._clock = clock

    def _client(self, service: str, plan: Plan):
        key = (service, plan.target.region)
        if key not in self._clients:
            self._clients[key] = self._factory(*key)
        return self._clients[key]

    # Reads. The EC2 API is eventually consistent: a tag set in the console, or a state change
    # another reaper caused, may take a moment to show in DescribeInstances (EC2 developer
    # guide, "Eventual consistency in the Amazon EC2 API",
    # https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html).

    def _instances(self, plan: Plan) -> list[dict]:
        pages = (
            self._client("ec2", plan)
            .get_paginator("describe_instances")
            .paginate(
                Filters=[
                    *cluster_filters(plan),
                    {"Name": "instance-state-name", "Values": LIVE_STATES},
                ]
            )
        )
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def _groups(self, plan: Plan) -> list[dict]:
        pages = (
            self._client("autoscaling", plan)
            .get_paginator("describe_auto_scaling_groups")
            .paginate(Filters=cluster_filters(plan))
        )
        return [g for page in pages for g in page["AutoScalingGroups"]]

    def _read(self, plan: Plan, action: str | None) -> tuple[list[dict], list[dict]]:
        instances = self._instances(plan)
        grouped = plan.purpose == "inference" or action == "scale-to-zero"
        return instances, self._groups(plan) if grouped else []

    def live(self, plan: Plan, action: str | None = None) -> Live:
        """Protected when the cluster's instances or groups carry rackform:protect=true now (a
        person can set that in the console, without a commit); snoozed by the tag
        rackform:snooze-until; `off` for `action` from live instance state and group sizes."""
        try:
            instances, groups = self._read(plan, action)
        except aws_errors() as exc:
            return Live(error=f"cannot read the cluster's live state from AWS: {one_line(exc)}")
        return live_state(instances, groups, action)

    # Actions.

    def act(self, plan: Plan, action: str) -> list[Outcome]:
        if action == "destroy":
            return [_destroy(plan)]
        if action not in ("stop", "scale-to-zero"):
            raise ValueError(f"{action} is not an AWS idle action")
        try:
            return self._stop(plan) if action == "stop" else self._scale_to_zero(plan)
        except aws_errors() as exc:
            return [Outcome(plan.stack, False, one_line(exc))]

    def _stop(self, plan: Plan) -> list[Outcome]:
        """StopInstances on the running ones, then wait until each reports `stopped`. A stop
        wipes the instance-store NVMe drives (EC2 user guide, "Data persistence for Amazon EC2
        instance store volumes": the data does not persist when the instance is stopped,
        https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-store-lifetime.html); the
        next `rackform configure` builds the checkpoint array again."""
        found = {i["InstanceId"]: i["State"]["Name"] for i in self._instances(plan)}
        if not found:
            return [Outcome(plan.stack, True, "no instances: nothing to stop")]
        starting = sorted(i for i, s in found.items() if s == "pending")
        if starting:
            # Someone is bringing the cluster up (a pending instance was just launched or
            # started): stopping the rest would fight them.
            why = f"{', '.join(starting)} is starting (pending): nothing was stopped"
            return [Outcome(i, False, why) for i in sorted(found)]
        running = sorted(i for i, s in found.items() if s == "running")
        stopping = sorted(i for i, s in found.items() if s == "stopping")
        out = {i: Outcome(i, True, "already stopped") for i, s in found.items() if s == "stopped"}
        ec2 = self._client("ec2", plan)
        moved: dict[str, str] = {i: "already stopping" for i in stopping}
        if running:
            try:
                answer = ec2.stop_instances(InstanceIds=running)["StoppingInstances"]
            except aws_errors() as exc:
                out.update({i: Outcome(i, False, f"not stopped: {one_line(exc)}") for i in running})
            else:
                for a in answer:
                    was, now = a["PreviousState"]["Name"], a["CurrentState"]["Name"]
                    moved[a["InstanceId"]] = f"{was} -> {now}"
                for i in running:
                    moved.setdefault(i, "running -> (not in the StopInstances answer)")
        if moved:
            out.update(self._confirm(ec2, moved))
        return [out[i] for i in sorted(out)]

    def _confirm(self, ec2, moved: dict[str, str]) -> dict[str, Outcome]:
        """Poll DescribeInstances until every instance in `moved` reports `stopped`, for at most
        timeout_s; one Outcome each, failed where it did not get there in time."""
        ids = sorted(moved)
        deadline = self._clock() + self.timeout_s
        states: dict[str, str] = {}
        try:
            while True:
                pages = ec2.get_paginator("describe_instances").paginate(InstanceIds=ids)
                states = {
                    i["InstanceId"]: i["State"]["Name"]
                    for page in pages
                    for r in page["Reservations"]
                    for i in r["Instances"]
                }
                left = self._clock()
                if all(states.get(i) == "stopped" for i in ids) or left >= deadline:
                    break
                self._sleep(min(self.poll_s, deadline - left))
        except aws_errors() as exc:
            why = f"stop requested; could not confirm it: {one_line(exc)}"
            return {i: Outcome(i, False, f"{moved[i]}, {why}") for i in ids}
        return {
            i: Outcome(i, True, f"{moved[i]} -> stopped")
            if states.get(i) == "stopped"
            else Outcome(
                i,
                False,
                f"{moved[i]}, still {states.get(i, 'not reported')} after {self.timeout_s:g} s",
            )
            for i in ids
        }

    def _scale_to_zero(self, plan: Plan) -> list[Outcome]:
        """Desired capacity 0 on each group carrying the cluster's tags; Auto Scaling then
        terminates its instances by the group's termination policy (Auto Scaling API reference,
        "SetDesiredCapacity"; the instances pass through Terminating to Terminated,
        https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-lifecycle.html)."""
        groups = self._groups(plan)
        if not groups:
            return [Outcome(plan.stack, False, "no autoscaling group carries the cluster's tags")]
        asg = self._client("autoscaling", plan)
        out = []
        for g in sorted(groups, key=lambda g: g["AutoScalingGroupName"]):
            name = g["AutoScalingGroupName"]
            # An instance protected from scale in stays in service whatever the desired
            # capacity (Auto Scaling user guide, "Use instance scale-in protection",
            # https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-instance-protection.html):
            # the group is not off, and the outcome says so.
            kept = sorted(
                i["InstanceId"]
                for i in g.get("Instances", [])
                if i.get("ProtectedFromScaleIn") and i["InstanceId"] in _in_group(g)
            )
            if g["DesiredCapacity"] == 0:
                done = "already at zero"
            else:
                try:
                    asg.update_auto_scaling_group(
                        AutoScalingGroupName=name, MinSize=0, DesiredCapacity=0
                    )
                except aws_errors() as exc:
                    out.append(Outcome(name, False, one_line(exc)))
                    continue
                done = f"desired {g['DesiredCapacity']} -> 0"
            if kept:
                why = (
                    f"{done}, but {', '.join(kept)} is protected from scale in and stays in service"
                )
                out.append(Outcome(name, False, why))
            else:
                out.append(Outcome(name, True, done))
        return out

    # Snooze.

    def snooze(self, plan: Plan, until: float, reason: str) -> list[Outcome]:
        """Tag every instance (and, for inference, every autoscaling group, not propagated to
        the instances it launches) with rackform:snooze-until / rackform:snooze-reason, so every
        later `live()` on any machine reports it."""
        value = iso(until)
        reason = reason[:TAG_VALUE_MAX]
        try:
            instances, groups = self._read(plan, None)
        except aws_errors() as exc:
            return [
                Outcome(plan.stack, False, f"cannot read the cluster from AWS: {one_line(exc)}")
            ]
        if not instances and not groups:
            return [Outcome(plan.stack, False, "no instance or group carries the cluster's tags")]
        done = f"{SNOOZE_UNTIL_TAG}={value}"
        out = []
        ids = sorted(i["InstanceId"] for i in instances)
        if ids:
            tags = [
                {"Key": SNOOZE_UNTIL_TAG, "Value": value},
                {"Key": SNOOZE_REASON_TAG, "Value": reason},
            ]
            try:
                self._client("ec2", plan).create_tags(Resources=ids, Tags=tags)
                out += [Outcome(i, True, done) for i in ids]
            except aws_errors() as exc:
                out += [Outcome(i, False, one_line(exc)) for i in ids]
        for name in sorted(g["AutoScalingGroupName"] for g in groups):
            tags = [
                {
                    "ResourceId": name,
                    "ResourceType": "auto-scaling-group",
                    "Key": k,
                    "Value": v,
                    "PropagateAtLaunch": False,
                }
                for k, v in ((SNOOZE_UNTIL_TAG, value), (SNOOZE_REASON_TAG, reason))
            ]
            try:
                self._client("autoscaling", plan).create_or_update_tags(Tags=tags)
                out.append(Outcome(name, True, done))
            except aws_errors() as exc:
                out.append(Outcome(name, False, one_line(exc)))
        return out


def live_state(instances: list[dict], groups: list[dict], action: str | None) -> Live:
    """Live from DescribeInstances' instances and DescribeAutoScalingGroups' groups."""
    tagged = [(i["InstanceId"], tags_of(i)) for i in instances]
    tagged += [(g["AutoScalingGroupName"], tags_of(g)) for g in groups]
    snoozes = []
    for subject, tags in tagged:
        if SNOOZE_UNTIL_TAG not in tags:
            continue
        until = parse_until(tags[SNOOZE_UNTIL_TAG])
        if until is None:
            return Live(
                error=f"{SNOOZE_UNTIL_TAG}={tags[SNOOZE_UNTIL_TAG]!r} on {subject} is not a UTC "
                f"time like {SNOOZE_EXAMPLE}: fix or remove the tag (nothing is done until then)"
            )
        snoozes.append((until, tags.get(SNOOZE_REASON_TAG, ""), subject))
    protect = sorted(s for s, tags in tagged if tags.get(PROTECT_TAG, "").strip().lower() == "true")
    # LaunchTime is when the instance was last launched, so a stopped instance started again
    # is young (EC2 API reference, Instance: "The time that the instance was last launched",
    # https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Instance.html). A stopped
    # instance does not make the cluster old.
    started = min(
        (i["LaunchTime"].timestamp() for i in instances if i["State"]["Name"] in ("pending", "running")),
        default=None,
    )  # fmt: skip
    off, off_detail = _off(instances, groups, action)
    states: dict[str, int] = {}
    for i in instances:
        states[i["State"]["Name"]] = states.get(i["State"]["Name"], 0) + 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    detail = [f"{len(instances)} instances in EC2" + (f" ({counts})" if counts else "")]
    if groups:
        sizes = ", ".join(
            f"{g['AutoScalingGroupName']} desired {g['DesiredCapacity']}"
            for g in sorted(groups, key=lambda g: g["AutoScalingGroupName"])
        )
        detail.append(f"autoscaling groups: {sizes}")
    if protect:
        detail.append(f"{PROTECT_TAG}=true on " + ", ".join(protect))
    until, reason = None, ""
    if snoozes:
        until, reason, subject = max(snoozes)
        stamp = iso(until)
        detail.append(f"{SNOOZE_UNTIL_TAG}={stamp} on {subject}")
    if off_detail:
        detail.append(off_detail)
    return Live(
        protected=bool(protect),
        started=started,
        detail="; ".join(detail),
        snoozed_until=until,
        snooze_reason=reason,
        off=off,
    )


def parse_until(value: str) -> float | None:
    """Unix time from an ISO-8601 time with a zone (2026-11-25T18:00:00Z); None otherwise (a
    time without a zone is ambiguous, and read as unparseable)."""
    try:
        t = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return t.timestamp() if t.tzinfo is not None else None


def _off(instances: list[dict], groups: list[dict], action: str | None) -> tuple[bool | None, str]:
    if action == "stop":
        if not instances:
            return True, "no instances"
        on = [i["InstanceId"] for i in instances if i["State"]["Name"] in ("pending", "running")]
        if on:
            return False, f"{len(on)} of {len(instances)} instances not stopped"
        return True, "every instance stopped or stopping"
    if action == "scale-to-zero":
        if not groups:
            return True, "no autoscaling group carries the cluster's tags"
        up = [g["AutoScalingGroupName"] for g in groups if g["DesiredCapacity"] or _in_group(g)]
        if up:
            return False, "not at zero: " + ", ".join(sorted(up))
        return True, "every autoscaling group at zero"
    return None, ""


def _in_group(group: dict) -> list[str]:
    """The group's instances that are not on their way out (Pending*, InService, Standby...)."""
    return [
        i["InstanceId"]
        for i in group.get("Instances", [])
        if not i["LifecycleState"].startswith(("Terminating", "Terminated"))
    ]


def _destroy(plan: Plan) -> Outcome:
    """`pulumi destroy` of the cluster's stack, through the Automation API (the real CLI on
    PATH). Never of the data tier's own stack (`plan.data_stack`: a kept file system and the
    network it sits in), which no idle action deletes; and not of a stack that still holds
    that tier from before it had a stack of its own (`rackform data move` first), which would
    stop at the file system's subnet."""
    from rackform.plan.targets.aws.data_layout import pieces
    from rackform.stack.data_stack import DataStackError, check_moved
    from rackform.stack.workspace import WorkspaceError, open_stack, run

    try:
        check_moved(plan, pieces(plan), plan.project, "reap")
        stack = open_stack(plan, plan.project)
    except (WorkspaceError, DataStackError) as exc:
        return Outcome(plan.stack, False, str(exc))
    lines: list[str] = []
    code = run(
        stack, "destroy", on_output=lines.append, on_error=lambda x: print(x, file=sys.stderr)
    )
    if code:
        return Outcome(plan.stack, False, f"pulumi destroy exited {code}")
    if plan.data_stack:
        return Outcome(plan.stack, True, f"stack destroyed; its data tier {plan.data_stack} kept")
    return Outcome(plan.stack, True, "stack destroyed")
