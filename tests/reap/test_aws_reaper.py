"""Reap on AWS. AWS cannot be reached from the test machines, so moto's server stands in for it:
EC2 and Auto Scaling over HTTP on 127.0.0.1 (tests/reap/moto_server.py), reached by real boto3
clients with dummy credentials. botocore `Stubber`s remain only for what moto cannot show: an
instance that stays `pending` or `stopping`, API errors, and the exact parameters of a request.
The Pulumi CLI cannot be installed here, so `destroy` goes through the Automation API to the
recording stand-in `pulumi` of tests/cli/fake_pulumi.py, put first on PATH."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from moto_server import REGION, Aws

from rackform.engine import prepare
from rackform.reap.idleness import GpuStats
from rackform.reap.notify import Notifier
from rackform.reap.run import World, run_all, usd_per_gpu_hour
from rackform.reap.verdict import decide, protected
from rackform.targets.aws.reap import AwsReaper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
import fake_pulumi

BP = """\
name: {name}
purpose: {purpose}
owner: a@example.com
target: {{type: aws, region: us-east-1, availability_zone: us-east-1a, ssh_cidrs: [10.0.0.0/16]}}
node_groups: [{{name: g, instance_type: g6e.12xlarge, count: 2{extra}}}]
network: {{fabric: ethernet}}
lifecycle:
  idle: {{gpu_util_below_pct: 10, for_minutes: 60, action: {action}, grace_minutes: 0}}
"""
INFERENCE = {"purpose": "inference", "action": "scale-to-zero", "extra": ", min_count: 0, max_count: 4"}  # fmt: skip


pytestmark = pytest.mark.usefixtures("no_aws")


def reaper(aws: Aws, **kw) -> AwsReaper:
    """A reaper of its own (its own boto3 clients), as another machine would have."""
    return AwsReaper(client=aws.client, **{"timeout_s": 5, "poll_s": 0.05, **kw})


def plan(tmp_path, name="llm-train-a", purpose="training", action="stop", extra=""):
    f = tmp_path / f"{name}.yaml"
    f.write_text(BP.format(name=name, purpose=purpose, action=action, extra=extra))
    return prepare(f).plan


def details(outcomes) -> dict[str, tuple[bool, str]]:
    return {o.subject: (o.ok, o.detail) for o in outcomes}


# EC2: live state.


def test_live_reads_state_and_launch_time_of_the_clusters_instances_only(tmp_path, aws):
    mine = aws.launch("llm-train-a", hours_ago=5)
    aws.launch("llm-train-a2", hours_ago=0.1)  # a similar name, started just now
    aws.launch("llm-train-a", env="staging", hours_ago=0.1)
    live = reaper(aws).live(plan(tmp_path), "stop")
    assert live.error is None
    assert live.off is False and live.protected is False
    assert abs(live.started - (time.time() - 5 * 3600)) < 120
    assert live.detail.startswith("2 instances in EC2 (2 running)")
    assert len(mine) == 2


def test_a_stopped_cluster_started_again_is_young(tmp_path, aws):
    old, restarted = aws.launch("llm-train-a", hours_ago=30)
    aws.ec2.stop_instances(InstanceIds=[old])
    # Started again ten minutes ago: EC2 sets LaunchTime anew on every start.
    aws.launched([restarted], hours_ago=10 / 60)
    live = reaper(aws).live(plan(tmp_path), "stop")
    assert abs(live.started - (time.time() - 600)) < 120
    assert live.off is False  # one instance still runs
    aws.ec2.stop_instances(InstanceIds=[restarted])
    assert reaper(aws).live(plan(tmp_path), "stop").started is None


def test_a_protect_tag_set_outside_the_blueprint_protects(tmp_path, aws):
    ids = aws.launch("llm-train-a", tags={"rackform:protect": "false"})  # as the stack tags
    other = aws.launch("llm-train-a2")
    aws.ec2.create_tags(Resources=other, Tags=[{"Key": "rackform:protect", "Value": "true"}])
    assert reaper(aws).live(plan(tmp_path)).protected is False  # another cluster's tag
    # A person sets it in the console on one instance.
    aws.ec2.create_tags(Resources=ids[1:], Tags=[{"Key": "rackform:protect", "Value": "true"}])
    live = reaper(aws).live(plan(tmp_path))
    assert live.protected is True
    assert f"rackform:protect=true on {ids[1]}" in live.detail


def test_no_instances_is_off_for_stop_and_unknown_for_the_rest(tmp_path, aws):
    aws.launch("llm-train-a2")
    r = reaper(aws)
    live = r.live(plan(tmp_path), "stop")
    assert (live.off, live.started) == (True, None) and "no instances" in live.detail
    assert r.live(plan(tmp_path), "destroy").off is None
    assert r.live(plan(tmp_path)).off is None
    assert details(r.act(plan(tmp_path), "stop")) == {
        "llm-train-a-default": (True, "no instances: nothing to stop")
    }
    assert aws.did("StopInstances") == 0


# EC2: stop.


def test_stop_stops_only_the_clusters_instances_and_confirms(tmp_path, aws):
    mine = aws.launch("llm-train-a")
    similar = aws.launch("llm-train-a2")
    shorter = aws.launch("llm-train")
    staging = aws.launch("llm-train-a", env="staging")
    out = reaper(aws).act(plan(tmp_path), "stop")
    assert details(out) == {i: (True, "running -> stopping -> stopped") for i in mine}
    assert set(aws.states(mine).values()) == {"stopped"}
    assert set(aws.states(similar + shorter + staging).values()) == {"running"}
    assert aws.did("StopInstances") == 1


def test_stop_leaves_stopped_instances_alone_and_reports_them(tmp_path, aws):
    first, second = aws.launch("llm-train-a")
    aws.ec2.stop_instances(InstanceIds=[first])
    out = reaper(aws).act(plan(tmp_path), "stop")
    assert details(out) == {
        first: (True, "already stopped"),
        second: (True, "running -> stopping -> stopped"),
    }


def test_a_second_reaper_finds_the_cluster_stopped_and_does_not_stop_it_again(tmp_path, aws):
    ids = aws.launch("llm-train-a", 3)
    p = plan(tmp_path)
    first, second = reaper(aws), reaper(aws)
    assert second.live(p, "stop").off is False
    assert all(o.ok for o in first.act(p, "stop"))
    live = second.live(p, "stop")
    assert live.off is True and "every instance stopped or stopping" in live.detail
    assert details(second.act(p, "stop")) == {i: (True, "already stopped") for i in ids}
    assert aws.did("StopInstances") == 1


# Auto Scaling: scale to zero.


def test_scale_to_zero_sets_only_the_clusters_groups_to_zero(tmp_path, aws):
    p = plan(tmp_path, "llm-serve-a", **INFERENCE)
    nodes = aws.group("llm-serve-a-g", "llm-serve-a", 2)
    aws.group("llm-serve-a2-g", "llm-serve-a2", 1)
    aws.group("llm-serve-a-staging-g", "llm-serve-a", 1, env="staging")
    r = reaper(aws)
    live = r.live(p, "scale-to-zero")
    assert live.off is False and "llm-serve-a-g desired 2" in live.detail
    assert live.started is not None  # the group's instances carry the cluster's tags
    assert details(r.act(p, "scale-to-zero")) == {"llm-serve-a-g": (True, "desired 2 -> 0")}
    assert aws.describe_group("llm-serve-a-g")["DesiredCapacity"] == 0
    assert aws.describe_group("llm-serve-a2-g")["DesiredCapacity"] == 1
    assert aws.describe_group("llm-serve-a-staging-g")["DesiredCapacity"] == 1
    assert set(aws.states(nodes).values()) == {"terminated"}


def test_a_second_reaper_finds_the_groups_at_zero(tmp_path, aws):
    p = plan(tmp_path, "llm-serve-a", **INFERENCE)
    aws.group("llm-serve-a-g", "llm-serve-a", 2)
    aws.group("llm-serve-a-h", "llm-serve-a", 1)
    first, second = reaper(aws), reaper(aws)
    first.act(p, "scale-to-zero")
    live = second.live(p, "scale-to-zero")
    assert live.off is True and "every autoscaling group at zero" in live.detail
    assert details(second.act(p, "scale-to-zero")) == {
        "llm-serve-a-g": (True, "already at zero"),
        "llm-serve-a-h": (True, "already at zero"),
    }
    assert aws.did("UpdateAutoScalingGroup") == 2


def test_an_instance_protected_from_scale_in_keeps_the_group_on(tmp_path, aws):
    p = plan(tmp_path, "llm-serve-a", **INFERENCE)
    kept, gone = aws.group("llm-serve-a-g", "llm-serve-a", 2)
    aws.asg.set_instance_protection(
        InstanceIds=[kept], AutoScalingGroupName="llm-serve-a-g", ProtectedFromScaleIn=True
    )
    why = f"but {kept} is protected from scale in and stays in service"
    assert details(reaper(aws).act(p, "scale-to-zero")) == {
        "llm-serve-a-g": (False, f"desired 2 -> 0, {why}")
    }
    assert aws.states([kept, gone]) == {kept: "running", gone: "terminated"}
    second = reaper(aws)
    live = second.live(p, "scale-to-zero")
    assert live.off is False and "not at zero: llm-serve-a-g" in live.detail
    assert details(second.act(p, "scale-to-zero")) == {
        "llm-serve-a-g": (False, f"already at zero, {why}")
    }
    assert aws.did("UpdateAutoScalingGroup") == 1


def test_scale_to_zero_without_a_group_fails_and_is_off(tmp_path, aws):
    p = plan(tmp_path, "llm-serve-a", **INFERENCE)
    aws.group("llm-serve-a2-g", "llm-serve-a2", 1)
    r = reaper(aws)
    assert r.live(p, "scale-to-zero").off is True
    assert details(r.act(p, "scale-to-zero")) == {
        "llm-serve-a-default": (False, "no autoscaling group carries the cluster's tags")
    }
    assert aws.did("UpdateAutoScalingGroup") == 0


def test_a_protect_tag_on_the_group_protects_an_inference_cluster(tmp_path, aws):
    p = plan(tmp_path, "llm-serve-a", **INFERENCE)
    aws.group("llm-serve-a-g", "llm-serve-a", 1)
    assert reaper(aws).live(p).protected is False
    aws.asg.create_or_update_tags(Tags=[{
        "ResourceId": "llm-serve-a-g", "ResourceType": "auto-scaling-group",
        "Key": "rackform:protect", "Value": "true", "PropagateAtLaunch": False}])  # fmt: skip
    live = reaper(aws).live(p)
    assert live.protected is True and "rackform:protect=true on llm-serve-a-g" in live.detail


# Snooze.


def test_a_snooze_tags_every_instance_and_every_later_read_reports_it(tmp_path, aws):
    ids = aws.launch("llm-train-a")
    other = aws.launch("llm-train-a2")
    until = int(time.time()) + 3600
    out = reaper(aws).snooze(plan(tmp_path), until, "demo at 5pm, ask ops@example.com")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(until))
    assert details(out) == {i: (True, f"rackform:snooze-until={stamp}") for i in ids}
    assert aws.tags(ids[0])["rackform:snooze-until"] == stamp
    assert "rackform:snooze-until" not in aws.tags(other[0])
    live = reaper(aws).live(plan(tmp_path), "stop")  # another machine's reaper
    assert (live.snoozed_until, live.snooze_reason) == (until, "demo at 5pm, ask ops@example.com")
    assert f"rackform:snooze-until={stamp}" in live.detail
    assert reaper(aws).live(plan(tmp_path, "llm-train-a2")).snoozed_until is None


def test_a_snooze_set_by_hand_is_read_and_the_latest_wins(tmp_path, aws):
    a, b = aws.launch("llm-train-a")
    for i, value, reason in (
        (a, "2026-11-25T18:00:00Z", "x"),
        (b, "2026-11-26T09:30:00+01:00", "y"),
    ):
        aws.ec2.create_tags(Resources=[i], Tags=[
            {"Key": "rackform:snooze-until", "Value": value},
            {"Key": "rackform:snooze-reason", "Value": reason}])  # fmt: skip
    live = reaper(aws).live(plan(tmp_path))
    assert live.snoozed_until == datetime(2026, 11, 26, 8, 30, tzinfo=UTC).timestamp()
    assert live.snooze_reason == "y"


@pytest.mark.parametrize("value", ["next tuesday", "2026-11-25T18:00:00", "2026-11-25"])
def test_an_unreadable_snooze_tag_is_an_error_naming_it(tmp_path, aws, value):
    _, b = aws.launch("llm-train-a")
    aws.ec2.create_tags(Resources=[b], Tags=[{"Key": "rackform:snooze-until", "Value": value}])
    live = reaper(aws).live(plan(tmp_path), "stop")
    assert live.error == (
        f"rackform:snooze-until={value!r} on {b} is not a UTC time like 2026-11-25T18:00:00Z: "
        "fix or remove the tag (nothing is done until then)"
    )


def test_a_snooze_on_an_inference_cluster_stays_on_its_groups_at_zero(tmp_path, aws):
    p = plan(tmp_path, "llm-serve-a", **INFERENCE)
    nodes = aws.group("llm-serve-a-g", "llm-serve-a", 1)
    until = int(time.time()) + 7200
    out = reaper(aws).snooze(p, until, "launch week")
    assert [o.subject for o in out] == [*nodes, "llm-serve-a-g"] and all(o.ok for o in out)
    tags = {t["Key"]: t for t in aws.describe_group("llm-serve-a-g")["Tags"]}
    assert tags["rackform:snooze-reason"]["Value"] == "launch week"
    assert tags["rackform:snooze-until"]["PropagateAtLaunch"] is False
    reaper(aws).act(p, "scale-to-zero")  # no instance is left to carry the snooze
    live = reaper(aws).live(p, "scale-to-zero")
    assert (live.snoozed_until, live.snooze_reason, live.off) == (until, "launch week", True)


def test_snoozing_a_cluster_with_nothing_in_aws_fails(tmp_path, aws):
    out = reaper(aws).snooze(plan(tmp_path), time.time() + 60, "")
    assert details(out) == {
        "llm-train-a-default": (False, "no instance or group carries the cluster's tags")
    }


# What moto cannot show: instances that stay pending or stopping, API errors, exact requests.


def stubbed(**kw):
    clients = {s: boto3.client(s, region_name=REGION, aws_access_key_id="test",
                               aws_secret_access_key="test") for s in ("ec2", "autoscaling")}  # fmt: skip
    stubs = {s: Stubber(c) for s, c in clients.items()}
    for s in stubs.values():
        s.activate()
    return AwsReaper(client=lambda service, region: clients[service], **kw), stubs


def described(*states: str, hours: float = 5) -> dict:
    launched = datetime.now(UTC) - timedelta(hours=hours)
    return {"Reservations": [{"Instances": [
        {"InstanceId": f"i-{n}", "LaunchTime": launched, "State": {"Name": s},
         "Tags": [{"Key": "rackform:cluster", "Value": "llm-train-a"}]}
        for n, s in enumerate(states)]}]}  # fmt: skip


BY_TAGS = {"Filters": [
    {"Name": "tag:rackform:cluster", "Values": ["llm-train-a"]},
    {"Name": "tag:rackform:environment", "Values": ["default"]},
    {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}]}  # fmt: skip


class FakeTime:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


def test_stop_asks_for_the_running_instances_only_and_polls_until_stopped(tmp_path):
    clock = FakeTime()
    r, stubs = stubbed(timeout_s=600, poll_s=15, sleep=clock.sleep, clock=lambda: clock.now)
    ec2 = stubs["ec2"]
    ec2.add_response("describe_instances", described("running", "stopped", "running"), BY_TAGS)
    ec2.add_response(
        "stop_instances",
        {"StoppingInstances": [
            {"InstanceId": i, "PreviousState": {"Name": "running", "Code": 16},
             "CurrentState": {"Name": "stopping", "Code": 64}} for i in ("i-0", "i-2")]},
        {"InstanceIds": ["i-0", "i-2"]},
    )  # fmt: skip
    for states in (("stopping", "stopping"), ("stopped", "stopping"), ("stopped", "stopped")):
        answer = described(*states)
        for i, n in zip(answer["Reservations"][0]["Instances"], (0, 2), strict=True):
            i["InstanceId"] = f"i-{n}"
        ec2.add_response("describe_instances", answer, {"InstanceIds": ["i-0", "i-2"]})
    out = r.act(plan(tmp_path), "stop")
    ec2.assert_no_pending_responses()
    assert clock.slept == [15, 15]
    assert details(out) == {
        "i-0": (True, "running -> stopping -> stopped"),
        "i-1": (True, "already stopped"),
        "i-2": (True, "running -> stopping -> stopped"),
    }


def test_an_instance_not_stopped_in_time_is_a_failure(tmp_path):
    clock = FakeTime()
    r, stubs = stubbed(timeout_s=30, poll_s=15, sleep=clock.sleep, clock=lambda: clock.now)
    ec2 = stubs["ec2"]
    ec2.add_response("describe_instances", described("stopping"), BY_TAGS)
    for _ in range(3):  # at 0, 15 and 30 s
        ec2.add_response("describe_instances", described("stopping"), {"InstanceIds": ["i-0"]})
    out = r.act(plan(tmp_path), "stop")
    ec2.assert_no_pending_responses()  # and no StopInstances: it was already stopping
    assert details(out) == {"i-0": (False, "already stopping, still stopping after 30 s")}


def test_a_starting_instance_stops_nothing(tmp_path):
    r, stubs = stubbed()
    stubs["ec2"].add_response("describe_instances", described("running", "pending"), BY_TAGS)
    out = r.act(plan(tmp_path), "stop")  # a stop_instances call would find no answer and fail
    stubs["ec2"].assert_no_pending_responses()
    why = "i-1 is starting (pending): nothing was stopped"
    assert details(out) == {"i-0": (False, why), "i-1": (False, why)}


def test_api_errors_are_one_line_and_nothing_is_done(tmp_path):
    r, stubs = stubbed()
    stubs["ec2"].add_client_error(
        "describe_instances", "UnauthorizedOperation", "You are not authorized.\nEncoded: xyz"
    )
    live = r.live(plan(tmp_path), "stop")
    assert live.error == (
        "cannot read the cluster's live state from AWS: ClientError: An error occurred "
        "(UnauthorizedOperation) when calling the DescribeInstances operation: You are not "
        "authorized."
    )
    stubs["ec2"].add_response("describe_instances", described("running"), BY_TAGS)
    stubs["ec2"].add_client_error("stop_instances", "UnauthorizedOperation", "denied")
    out = r.act(plan(tmp_path), "stop")
    assert [(o.subject, o.ok) for o in out] == [("i-0", False)]
    assert out[0].detail.startswith("not stopped: ClientError")


def test_without_credentials_the_live_state_cannot_be_read(tmp_path):
    live = AwsReaper().live(plan(tmp_path), "stop")  # real boto3, no credentials
    assert live.error is not None and live.error.startswith(
        "cannot read the cluster's live state from AWS: NoCredentialsError"
    )


# Through the reap run (rackform/reap/run.py), with moto.


def idle_cluster(tmp_path, name="llm-train-a", purpose="training", action="stop", extra=""):
    f = tmp_path / f"{name}.yaml"
    f.write_text(BP.format(name=name, purpose=purpose, action=action, extra=extra))
    p = prepare(f)
    series = [
        GpuStats(f"i-{n}", str(g), peak=2.0, sum=60.0, samples=60, fb_min=0.0, fb_max=0.0,
                 expected=60, before=60)
        for n in range(2)
        for g in range(4)
    ]  # fmt: skip
    d = decide(p.plan, series, usd_per_gpu_hour(p), str(f), time.time())
    protected(d, p.plan)
    assert (d.verdict, d.action) == ("idle", action)
    return p, d


def run(tmp_path, p, d, reaper):
    # grace_minutes: 0 in the blueprint: Prometheus is never asked again (prom=None).
    world = World(tmp_path / "state", Notifier(), None, reapers=lambda target: reaper)
    run_all([d], [p], world, apply=True)


def test_the_run_stops_an_idle_cluster(tmp_path, aws):
    ids = aws.launch("llm-train-a")
    p, d = idle_cluster(tmp_path)
    run(tmp_path, p, d, reaper(aws))
    assert d.outcome == "done"
    assert set(aws.states(ids).values()) == {"stopped"}


def test_the_run_leaves_a_cluster_protected_in_the_console_running(tmp_path, aws):
    ids = aws.launch("llm-train-a")
    aws.ec2.create_tags(Resources=ids[:1], Tags=[{"Key": "rackform:protect", "Value": "true"}])
    p, d = idle_cluster(tmp_path)
    run(tmp_path, p, d, reaper(aws))
    assert (d.verdict, d.action, d.outcome) == ("protected", None, "none")
    assert f"rackform:protect=true on {ids[0]}" in d.reasons[-1]
    assert set(aws.states(ids).values()) == {"running"} and aws.did("StopInstances") == 0


def test_the_run_leaves_instances_younger_than_the_window_alone(tmp_path, aws):
    ids = aws.launch("llm-train-a", hours_ago=0.25)
    p, d = idle_cluster(tmp_path)
    run(tmp_path, p, d, reaper(aws))
    assert (d.verdict, d.outcome) == ("young", "none")
    assert set(aws.states(ids).values()) == {"running"}


def test_the_run_does_nothing_when_the_live_state_cannot_be_read(tmp_path):
    p, d = idle_cluster(tmp_path)
    run(tmp_path, p, d, AwsReaper())  # real boto3, no credentials
    assert (d.verdict, d.outcome) == ("unknown", "none")
    assert d.read_failed
    assert "NoCredentialsError" in d.reasons[-1]


# destroy.


def test_destroy_runs_pulumi_destroy_on_the_stack(tmp_path, monkeypatch, aws):
    bin_dir = tmp_path / "bin"
    fake_pulumi.install(bin_dir)
    for k, v in fake_pulumi.environ(bin_dir, tmp_path).items():
        monkeypatch.setenv(k, v)
    out = reaper(aws).act(plan(tmp_path, "d1", action="destroy"), "destroy")
    assert details(out) == {"d1-default": (True, "stack destroyed")}
    calls = [
        json.loads(line)["argv"] for line in (tmp_path / "pulumi.log").read_text().splitlines()
    ]
    ops = [[a for a in c if a != "--non-interactive"] for c in calls]
    destroys = [c for c in ops if c[0] == "destroy"]
    assert len(destroys) == 1 and destroys[0][-2:] == ["--stack", "d1-default"]


def test_destroy_without_the_pulumi_cli_says_so(tmp_path, monkeypatch, aws):
    p = plan(tmp_path, "d2", action="destroy")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    (out,) = reaper(aws).act(p, "destroy")
    assert not out.ok and "the pulumi CLI is not on PATH" in out.detail
