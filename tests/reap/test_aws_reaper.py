"""Reap on AWS, in process. AWS cannot be reached from the test machines, so EC2 and Auto
Scaling are botocore `Stubber`s (the SDK's own stand-in, which checks every request's
parameters); the Pulumi CLI cannot be installed here, so `destroy` goes through the Automation
API to the recording stand-in `pulumi` of tests/cli/fake_pulumi.py, put first on PATH."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from rackform.engine import prepare
from rackform.reap.measure import GpuSeries
from rackform.reap.notify import Notifier
from rackform.reap.run import Acting, apply_all, usd_per_gpu_hour
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
  idle: {{gpu_util_below_pct: 10, for_minutes: 60, action: {action}}}
"""
FILTERS = [
    {"Name": "tag:rackform:cluster", "Values": ["{name}"]},
    {"Name": "tag:rackform:environment", "Values": ["default"]},
]


@pytest.fixture(autouse=True)
def no_aws(monkeypatch):
    # Never reach AWS or the instance metadata address for credentials.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for var in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)


def idle_cluster(tmp_path, name="c1", purpose="training", action="stop", extra=""):
    f = tmp_path / f"{name}.yaml"
    f.write_text(BP.format(name=name, purpose=purpose, action=action, extra=extra))
    p = prepare(f)
    series = [
        GpuSeries(f"i-{n}", str(g), 1.0, 2.0, 0.0, True, True) for n in range(2) for g in range(4)
    ]
    d = decide(p.plan, series, usd_per_gpu_hour(p), str(f))
    protected(d, p.plan)
    assert (d.verdict, d.action) == ("idle", action)
    return p, d


def stubbed(name: str):
    clients = {s: boto3.client(s, region_name="us-east-1", aws_access_key_id="test",
                               aws_secret_access_key="test") for s in ("ec2", "autoscaling")}  # fmt: skip
    stubs = {s: Stubber(c) for s, c in clients.items()}
    for s in stubs.values():
        s.activate()
    return AwsReaper(client=lambda service, region: clients[service]), stubs


def instances(name: str, protect: str = "false", hours: float = 5) -> dict:
    launched = datetime.now(UTC) - timedelta(hours=hours)
    return {"Reservations": [{"Instances": [
        {"InstanceId": f"i-{n}", "LaunchTime": launched, "State": {"Name": "running"},
         "Tags": [{"Key": "rackform:cluster", "Value": name},
                  {"Key": "rackform:protect", "Value": protect if n == 1 else "false"}]}
        for n in range(2)]}]}  # fmt: skip


def describe(name: str) -> dict:
    filters = json.loads(json.dumps(FILTERS).replace("{name}", name))
    return {"Filters": [*filters, {"Name": "instance-state-name",
                                   "Values": ["pending", "running", "stopping", "stopped"]}]}  # fmt: skip


def run(tmp_path, p, d, reaper):
    acting = Acting(tmp_path / "state", Notifier(), reapers=lambda target: reaper)
    apply_all([d], [p], acting)


def test_stop_stops_the_training_instances(tmp_path):
    p, d = idle_cluster(tmp_path)
    reaper, stubs = stubbed("c1")
    stubs["ec2"].add_response("describe_instances", instances("c1"), describe("c1"))
    stubs["ec2"].add_response("describe_instances", instances("c1"), describe("c1"))
    stubs["ec2"].add_response(
        "stop_instances",
        {"StoppingInstances": [
            {"InstanceId": f"i-{n}", "PreviousState": {"Name": "running", "Code": 16},
             "CurrentState": {"Name": "stopping", "Code": 64}} for n in range(2)]},
        {"InstanceIds": ["i-0", "i-1"]},
    )  # fmt: skip
    run(tmp_path, p, d, reaper)
    stubs["ec2"].assert_no_pending_responses()
    assert d.outcome == "done"
    assert [r["detail"] for r in d.results] == ["running -> stopping"] * 2


def test_a_protect_tag_set_in_the_console_wins(tmp_path):
    p, d = idle_cluster(tmp_path)
    reaper, stubs = stubbed("c1")
    stubs["ec2"].add_response("describe_instances", instances("c1", protect="true"), describe("c1"))
    run(tmp_path, p, d, reaper)  # a stop_instances call would find no stubbed answer and fail
    stubs["ec2"].assert_no_pending_responses()
    assert (d.verdict, d.action, d.outcome) == ("protected", None, "skipped")
    assert "rackform:protect=true on i-1" in d.reasons[-1]


def test_instances_younger_than_the_window_are_left_alone(tmp_path):
    p, d = idle_cluster(tmp_path)
    reaper, stubs = stubbed("c1")
    stubs["ec2"].add_response("describe_instances", instances("c1", hours=0.25), describe("c1"))
    run(tmp_path, p, d, reaper)
    assert (d.verdict, d.outcome) == ("young", "skipped")


def test_unreadable_live_tags_mean_nothing_is_done(tmp_path):
    p, d = idle_cluster(tmp_path)
    reaper = AwsReaper()  # real boto3, no credentials: it cannot read the tags
    run(tmp_path, p, d, reaper)
    assert (d.verdict, d.outcome) == ("unknown", "skipped")
    assert "cannot read the cluster's live tags from EC2: NoCredentialsError" in d.reasons[-1]


def test_scale_to_zero_sets_the_inference_groups_to_zero(tmp_path):
    p, d = idle_cluster(
        tmp_path, "s1", "inference", "scale-to-zero", ", min_count: 0, max_count: 4"
    )
    reaper, stubs = stubbed("s1")
    stubs["ec2"].add_response("describe_instances", instances("s1"), describe("s1"))
    stubs["autoscaling"].add_response(
        "describe_auto_scaling_groups",
        {"AutoScalingGroups": [{"AutoScalingGroupName": "g-1a2b", "MinSize": 0, "MaxSize": 4,
                                "DesiredCapacity": 2, "DefaultCooldown": 300,
                                "AvailabilityZones": ["us-east-1a"], "HealthCheckType": "EC2",
                                "CreatedTime": datetime.now(UTC)}]},
        {"Filters": json.loads(json.dumps(FILTERS).replace("{name}", "s1"))},
    )  # fmt: skip
    stubs["autoscaling"].add_response(
        "update_auto_scaling_group", {},
        {"AutoScalingGroupName": "g-1a2b", "MinSize": 0, "DesiredCapacity": 0},
    )  # fmt: skip
    run(tmp_path, p, d, reaper)
    stubs["autoscaling"].assert_no_pending_responses()
    assert d.outcome == "done" and d.results[0]["detail"] == "desired 2 -> 0"


def test_destroy_runs_pulumi_destroy_on_the_stack(tmp_path, monkeypatch):
    p, d = idle_cluster(tmp_path, "d1", action="destroy")
    bin_dir = tmp_path / "bin"
    fake_pulumi.install(bin_dir)
    for k, v in fake_pulumi.environ(bin_dir, tmp_path).items():
        monkeypatch.setenv(k, v)
    reaper, stubs = stubbed("d1")
    stubs["ec2"].add_response("describe_instances", instances("d1"), describe("d1"))
    run(tmp_path, p, d, reaper)
    assert d.outcome == "done", d.results
    calls = [
        json.loads(line)["argv"] for line in (tmp_path / "pulumi.log").read_text().splitlines()
    ]
    ops = [[a for a in c if a != "--non-interactive"] for c in calls]
    destroys = [c for c in ops if c[0] == "destroy"]
    assert len(destroys) == 1 and destroys[0][-2:] == ["--stack", "d1-default"]


def test_destroy_without_the_pulumi_cli_says_so(tmp_path, monkeypatch):
    p, d = idle_cluster(tmp_path, "d2", action="destroy")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    reaper, stubs = stubbed("d2")
    stubs["ec2"].add_response("describe_instances", instances("d2"), describe("d2"))
    run(tmp_path, p, d, reaper)
    assert d.outcome == "failed"
    assert "the pulumi CLI is not on PATH" in d.results[0]["detail"]
