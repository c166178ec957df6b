"""`rackform up`'s wait for an AWS autoscaling group's nodes, which configure themselves at boot
(rackform/targets/aws/configured.py, through the runtime as `up` calls it): a node passed when
its group holds it InService and it tagged itself `rackform:configured` with the artifact the
blueprint pins for its group. AWS cannot be reached from the test machines: moto's server
stands in for EC2 and Auto Scaling (tests/moto_server.py), with real boto3 clients; what the
API cannot set (a node still in Pending:Wait, a group short of its desired capacity) is set in
moto's backend.

The groups try to fool it: a node tagged with another artifact, a node not tagged yet, one in
Pending:Wait that already tagged itself, a node of another group with a longer hyphenated name
(`serve-b` beside `serve`), an instance outside any group carrying the right tag, a terminating
node, a group that does not exist."""

from __future__ import annotations

import boto3
import pytest
from botocore.config import Config
from moto.autoscaling.models import autoscaling_backends
from moto.core import DEFAULT_ACCOUNT_ID
from moto_server import REGION, Aws
from planhelp import AWS_INFERENCE, variant, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.blueprint.targets.aws.names import asg_name
from rackform.boot.reports import FAILED, MISSING, PASSED, STALE
from rackform.boot.waiting import BootWait, wait_for_boot
from rackform.engine import compile_effective
from rackform.targets.aws.bootstrap import group_artifact
from rackform.targets.aws.configured import TAG, Configured
from rackform.targets.runtimes import runtime

pytestmark = pytest.mark.usefixtures("no_aws")

TWO_GROUPS = variant(
    AWS_INFERENCE,
    **{
        "target": {**AWS_INFERENCE["target"], "region": REGION, "availability_zone": "us-east-1a"},
        "node_groups": [
            {**AWS_INFERENCE["node_groups"][0], "count": 3},
            {**AWS_INFERENCE["node_groups"][0], "name": "serve-b", "count": 2},
        ],
    },
)


@pytest.fixture
def plan(tmp_path):
    return compile_effective(load_effective(write_blueprint(tmp_path, TWO_GROUPS)))


@pytest.fixture
def moto_env(aws, monkeypatch):
    """The runtime's own boto3 clients pointed at moto (boto3's AWS_ENDPOINT_URL)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return aws


def pins(plan) -> dict[str, str]:
    return {g.name: group_artifact(plan, g, asg_name(plan, g)).sha256 for g in plan.node_groups}


def groups(aws: Aws, plan) -> dict[str, list[str]]:
    """Each node group's Auto Scaling group, as the stack names it, with its instances."""
    return {
        g.name: aws.group(asg_name(plan, g), plan.name, g.count, env=plan.environment)
        for g in plan.node_groups
    }


def tag(aws: Aws, iid: str, sha: str) -> None:
    aws.ec2.create_tags(Resources=[iid], Tags=[{"Key": TAG, "Value": sha}])


def backend_group(name: str):
    return autoscaling_backends[DEFAULT_ACCOUNT_ID][REGION].autoscaling_groups[name]


def lifecycle(name: str, iid: str, state: str) -> None:
    for s in backend_group(name).instance_states:
        if s.instance.id == iid:
            s.lifecycle_state = state


def address(aws: Aws, iid: str) -> str:
    (r,) = aws.ec2.describe_instances(InstanceIds=[iid])["Reservations"]
    return r["Instances"][0]["PrivateIpAddress"]


def test_each_node_not_configured_with_its_groups_artifact_is_named(moto_env, plan):
    aws, pin = moto_env, pins(plan)
    ids = groups(aws, plan)
    a1, a2, a3 = sorted(ids["serve"])
    b1, b2 = sorted(ids["serve-b"])
    tag(aws, a1, pin["serve"])
    tag(aws, a2, pin["serve-b"])  # configured, but with the other group's artifact
    # a3 not tagged: still configuring
    tag(aws, b1, pin["serve-b"])
    tag(aws, b2, pin["serve-b"])
    lifecycle(asg_name(plan, plan.node_groups[1]), b2, "Pending:Wait")  # tagged, hook not done
    outsider = aws.launch(plan.name, 1, env=plan.environment)[0]  # in no group, right tag
    tag(aws, outsider, pin["serve"])
    judged = wait_for_boot(plan, BootWait(0.3, poll_s=0.05), runtime(plan.target_type))
    assert judged.names(PASSED) == [a1, b1]
    assert judged.names(STALE) == [a2]
    assert judged.names(MISSING) == [a3, b2]
    assert outsider not in {r.node for r in judged.nodes}
    assert not judged.validated and judged.waited_s >= 0.3
    lines = dict(zip((r.node for r in judged.nodes if r.line), judged.lines(), strict=True))
    assert lines[a2].startswith(f"{a2} ({address(aws, a2)}, node group serve): WARNING")
    assert f"not the blueprint's {pin['serve'][:12]}" in lines[a2]
    assert lines[a3].startswith(f"{a3} ({address(aws, a3)}, node group serve): not configured")
    assert "(InService)" in lines[a3] and "rackform up" in lines[a3]
    assert "(Pending:Wait)" in lines[b2]
    check = judged.check()
    assert (check["status"], check["measured"], check["expected"]) == ("fail", 2, 5)


def test_the_wait_ends_as_soon_as_every_node_passed(moto_env, plan):
    aws, pin = moto_env, pins(plan)
    for group, ids in groups(aws, plan).items():
        for iid in ids:
            tag(aws, iid, pin[group])
    judged = wait_for_boot(plan, BootWait(60, poll_s=0.05), runtime(plan.target_type))
    assert judged.validated and len(judged.nodes) == 5 and judged.waited_s < 30
    assert judged.check()["status"] == "pass"


def test_a_group_short_of_its_desired_capacity_and_a_missing_group_are_named(aws, plan):
    pin = pins(plan)
    serve = plan.node_groups[0]
    name = asg_name(plan, serve)
    ids = aws.group(name, plan.name, serve.count, env=plan.environment)
    for iid in ids:
        tag(aws, iid, pin["serve"])
    lifecycle(name, ids[0], "Terminating:Wait")  # leaving: not one of its nodes any more
    backend_group(name).desired_capacity = 4
    judged = Configured(aws.client, sleep=lambda s: None).wait(plan, plan.node_groups, pin, 0)
    assert judged.names(PASSED) == sorted(ids[1:])
    short, gone = judged.names(MISSING)
    assert short == f"{name}[2/4]"
    assert gone == asg_name(plan, plan.node_groups[1])
    lines = judged.lines()
    assert f"{name}: 2 of its 4 desired instances are running" in lines[0]
    assert "no such Auto Scaling group" in lines[1] and "node group serve-b" in lines[1]


def test_aws_that_cannot_be_read_ends_the_wait_at_once_naming_each_group(plan):
    def unreachable(service: str, region: str):
        return boto3.client(
            service,
            region_name=region,
            endpoint_url="http://127.0.0.1:9",  # nothing listens on the discard port
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"max_attempts": 1}, connect_timeout=2),
        )

    slept: list[float] = []
    judged = Configured(unreachable, sleep=slept.append).wait(
        plan, plan.node_groups, pins(plan), 600
    )
    assert slept == []  # not waited for the deadline
    assert judged.names(FAILED) == [asg_name(plan, g) for g in plan.node_groups]
    assert "could not be read (EndpointConnectionError" in judged.lines()[0]
    assert not judged.validated
