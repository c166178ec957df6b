"""An AWS cluster's hosts after `up`, for reap, heal, rolling changes, jobs and status: found by
the cluster's tags, reached through the stack's EC2 Instance Connect Endpoint, and given up for
a new one (heal's `replace`). AWS cannot be reached from the test machines: moto's server stands
in for EC2 and Auto Scaling (tests/moto_server.py), with real boto3 clients. The tunnel itself
(the AWS CLI's `open-tunnel`) is only named in ssh's command line here.

Each case tries what would reach or destroy the wrong machine: the same Name in another
environment, a stopped instance of the same name, two running instances of one name, an instance
id of another cluster."""

from __future__ import annotations

import os
import re

import fake_ssh
import pytest
from moto_server import CTL, NODES, REGION, STACK, Aws, aws_slurm

from rackform.blueprint.schema.names import UnsafeValue
from rackform.engine import prepare
from rackform.lifecycle.outcome import ActionError
from rackform.scheduler.remote import RemoteError
from rackform.targets.aws.instances import Instances, tunnel
from rackform.targets.runtimes import controller

NODE0, NODE1 = NODES


pytestmark = pytest.mark.usefixtures("no_aws")


@pytest.fixture
def plan(tmp_path):
    f = tmp_path / "llm-train-a.yaml"
    f.write_text(aws_slurm(environments=("dev", "staging")))
    return prepare(f, "dev").plan


def named(aws: Aws, name: str, env: str = "dev") -> str:
    (iid,) = aws.launch("llm-train-a", 1, env=env, tags={"Name": name})
    return iid


def address(aws: Aws, iid: str) -> str:
    (r,) = aws.ec2.describe_instances(InstanceIds=[iid])["Reservations"]
    return r["Instances"][0]["PrivateIpAddress"]


def instances(aws: Aws, **kw) -> Instances:
    return Instances(aws.client, **{"timeout_s": 5, "poll_s": 0.05, **kw})


def test_a_node_and_the_controller_are_reached_through_the_endpoint(aws, plan):
    node, ctl = named(aws, NODE0), named(aws, CTL)
    named(aws, NODE0, env="staging")  # the same name in another environment
    ssh = instances(aws).reach(plan, NODE0, "/keys/id", "/keys/known_hosts")
    assert (ssh.user, ssh.address, ssh.port) == ("ubuntu", address(aws, node), 22)
    argv = ssh.argv()
    assert (
        "-o" in argv
        and (
            f"ProxyCommand=aws ec2-instance-connect open-tunnel --region {REGION} --instance-id {node}"
        )
        in argv
    )
    assert argv[argv.index("-i") + 1] == "/keys/id"
    assert 'UserKnownHostsFile="/keys/known_hosts"' in argv
    c = instances(aws).reach(plan, CTL)
    assert (c.address, c.proxy.split()[-1]) == (address(aws, ctl), ctl)


def test_only_a_running_instance_of_this_cluster_and_environment_is_reached(aws, plan):
    stopped = named(aws, NODE0)
    aws.ec2.stop_instances(InstanceIds=[stopped])
    named(aws, NODE0, env="staging")
    with pytest.raises(RemoteError, match=f"no running instance '{NODE0}' of cluster llm-train-a"):
        instances(aws).reach(plan, NODE0)
    other = aws.launch("llm-train-a2", 1, env="dev")[0]  # another cluster's instance, by id
    with pytest.raises(RemoteError, match="no running instance"):
        instances(aws).reach(plan, other)


def test_two_running_instances_of_one_name_are_refused_not_guessed(aws, plan):
    a, b = named(aws, NODE0), named(aws, NODE0)
    with pytest.raises(RemoteError, match="2 running instances are called") as e:
        instances(aws).reach(plan, NODE0)
    assert a in str(e.value) and b in str(e.value)
    with pytest.raises(ActionError, match=f"2 running instances are called '{NODE0}'"):
        instances(aws).nodes(plan)


def test_a_serving_node_is_reached_by_its_instance_id(aws, plan):
    (iid,) = aws.group(f"{STACK}-gpu-a", "llm-train-a", 1, env="dev")
    assert instances(aws).reach(plan, iid).proxy.endswith(f"--instance-id {iid}")


def test_the_running_nodes_as_the_stacks_output_names_them(aws, plan):
    node1 = named(aws, NODE1)
    named(aws, CTL)  # the controller is no node
    named(aws, NODE0, env="staging")
    assert instances(aws).nodes(plan) == {"gpu-a": [[NODE1, address(aws, node1), 22, node1]]}


def test_an_unreadable_ec2_is_one_line_not_a_traceback(plan):
    dead = Aws("http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(RemoteError, match=f"cannot look {NODE0} up in EC2: "):
        Instances(dead.client).reach(plan, NODE0)
    with pytest.raises(ActionError, match="cannot read the cluster's instances: "):
        Instances(dead.client).nodes(plan)


def test_replace_terminates_the_training_node_alone_and_says_what_launches_the_next(aws, plan):
    node0, node1 = named(aws, NODE0), named(aws, NODE1)
    same_name_elsewhere = named(aws, NODE0, env="staging")
    said = instances(aws).replace(plan, NODE0)
    assert aws.states([node0, node1, same_name_elsewhere]) == {
        node0: "terminated", node1: "running", same_name_elsewhere: "running"
    }  # fmt: skip
    assert said == (
        f"{node0} terminated, its capacity released; `rackform up --refresh` launches its "
        f"successor as {NODE0}"
    )


def test_replace_of_a_serving_node_keeps_its_groups_size(aws, plan):
    group = f"{STACK}-gpu-a"
    first, second = aws.group(group, "llm-train-a", 2, env="dev")
    said = instances(aws).replace(plan, first)
    assert aws.states([first, second]) == {first: "terminated", second: "running"}
    assert aws.describe_group(group)["DesiredCapacity"] == 2  # not lowered: a successor comes
    assert said == f"{first} terminated; its group {group} launches the successor"


def test_replace_waits_for_the_instance_to_be_gone_and_says_when_it_is_not(aws, plan, monkeypatch):
    named(aws, NODE0)
    inst = instances(aws, timeout_s=0.2)
    real = inst._client

    def still_shutting_down(service, region):
        c = real(service, region)
        if service == "ec2":
            c.meta.events.register(
                "after-call.ec2.DescribeInstances", lambda parsed, **_: _shutting(parsed)
            )
        return c

    inst._client = still_shutting_down
    with pytest.raises(ActionError, match=re.escape("is still shutting-down 0.2 s after it was")):
        inst.replace(plan, NODE0)


def _shutting(parsed: dict) -> None:
    for r in parsed.get("Reservations", []):
        for i in r["Instances"]:
            i["State"]["Name"] = "shutting-down"


def test_replace_of_an_unknown_name_touches_nothing(aws, plan):
    node1 = named(aws, NODE1)
    with pytest.raises(ActionError, match="no running instance"):
        instances(aws).replace(plan, NODE0)
    assert aws.states([node1]) == {node1: "running"}
    assert aws.did("TerminateInstances") == 0


def test_commands_reach_the_aws_controller_through_the_target(aws, plan, monkeypatch):
    # The shared path reap, heal, rolling changes, jobs and status take (rackform/targets/runtimes.py):
    # boto3's own endpoint setting points the runtime's default clients at moto.
    ctl = named(aws, CTL)
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    run = controller(plan)
    assert run.where == f"ubuntu@{address(aws, ctl)}:22"
    assert run.proxy.endswith(f"--instance-id {ctl}")


class _Ec2Answers:
    """An EC2 whose describe_instances answers `instance` (what moto never would: an id or an
    address that is not one), for whatever it is asked."""

    def __init__(self, instance: dict):
        self.instance = instance

    def __call__(self, service: str, region: str):
        return self

    def get_paginator(self, op: str):
        return self

    def paginate(self, **kw):
        return [{"Reservations": [{"Instances": [self.instance]}]}]


@pytest.mark.parametrize(
    "answer",
    [
        {"InstanceId": "i-0abc$(touch {marker})", "PrivateIpAddress": "10.0.0.9"},
        {"InstanceId": "i-0abc", "PrivateIpAddress": "-oProxyCommand=touch {marker}"},
    ],
)
def test_an_ec2_answer_that_is_no_id_or_address_never_reaches_ssh(
    plan, tmp_path, monkeypatch, answer
):
    """EC2's answer goes into ssh's command line (the address) and the tunnel's ProxyCommand,
    which ssh runs through a shell (the id): refused where it is read, so ssh (the fake, which
    runs a ProxyCommand it is given) never runs."""
    marker = tmp_path / "pwned"
    env = {**fake_ssh.environ(tmp_path, dict(os.environ)), "FAKE_SSH_RUN_PROXY": "1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    inst = {k: v.format(marker=marker) for k, v in answer.items()}
    inst["Tags"] = [{"Key": "Name", "Value": NODE0}]
    try:
        Instances(_Ec2Answers(inst)).reach(plan, NODE0)("true")
        refused = ""
    except RemoteError as exc:
        refused = str(exc)
    assert not marker.exists() and not (tmp_path / "ssh.log").exists()
    assert re.search(r"EC2 \(instance '.*'\) gives .* which is no (EC2 id|IP address)", refused)


def test_the_tunnel_names_an_instance_id_and_nothing_else():
    assert tunnel(REGION, "i-0123456789abcdef0") == (
        f"aws ec2-instance-connect open-tunnel --region {REGION} --instance-id i-0123456789abcdef0"
    )
    for bad in ("i-0 %h", "i-0'x", "--instance-id=x"):
        with pytest.raises(UnsafeValue, match="EC2 gives instance id"):
            tunnel(REGION, bad)
