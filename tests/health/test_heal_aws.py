"""`rackform heal --apply` on an AWS cluster, the real command: its nodes and Slurm's controller
are instances the stack created, found by the cluster's tags in EC2 (moto's server on loopback,
through boto3's own AWS_ENDPOINT_URL) and reached through the stack's EC2 Instance Connect
Endpoint (ssh's ProxyCommand, which tests/fake_ssh.py logs and does not open: it runs the
controller's commands here, against the local Slurm, whose nodes are not the AWS cluster's).

What it shows: the controller is reached at its instance's address through its own tunnel, as
the controller image's user, and a node whose action is `replace` is not terminated while Slurm
has not drained it (here Slurm does not know it: "not a node of the controller's Slurm"). The replace itself is
tests/targets/test_aws_instances.py's (moto) and tests/health/test_heal_apply.py's (Slurm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import fake_ssh
from blueprint_helpers import ROOT
from moto_server import CTL, NODES, REGION, aws_env, aws_slurm
from servers import Gpu, Series, prometheus
from slurm_local import ssh_env

from rackform.telemetry import labels as L

BP = aws_slurm("  health: {actions: {xid: {79: replace}}}\n")

SERVE = """\
name: llm-serve-a
purpose: inference
owner: ml-serving@example.com
target: {type: aws, region: us-east-1, availability_zone: us-east-1b, ssh_cidrs: [10.30.0.0/16]}
node_groups:
  - {name: serve-l40s, instance_type: g6e.12xlarge, count: 4, min_count: 2, max_count: 4}
network: {fabric: ethernet}
workload: {model_params_b: 8, method: serve, seq_len: 8192}
lifecycle:
  health: {actions: {xid: {79: replace, 48: reboot}}}
  max_out_of_service: 2
environments:
  dev: {}
"""


def heal(url: str, bp, env: dict, state, *flags) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "rackform", "heal", str(bp), "--env", "dev", "--prometheus", url,
         "--json", "--state-dir", str(state), *flags],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=180,
    )  # fmt: skip
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def series():
    gpus = [Gpu("llm-train-a", "dev", "training", n, g, 50.0) for n in NODES for g in range(8)]
    ids = ((L.CLUSTER, "llm-train-a"), (L.ENVIRONMENT, "dev"), (L.PURPOSE, "training"),
           (L.NODE, NODES[0]), (L.GPU, "3"))  # fmt: skip
    # XID 79 (fallen off the bus) on node 0 ten minutes ago.
    return gpus, [Series(L.XID_ERRORS, ids, lambda i, t: 79 if 8 <= i <= 12 else 0)]


def test_heal_reaches_the_aws_controller_through_its_tunnel_and_destroys_nothing_undrained(
    slurm, aws, tmp_path
):
    ids = {n: aws.launch("llm-train-a", 1, env="dev", tags={"Name": n})[0] for n in (*NODES, CTL)}
    (r,) = aws.ec2.describe_instances(InstanceIds=[ids[CTL]])["Reservations"]
    ctl_ip = r["Instances"][0]["PrivateIpAddress"]
    bp = tmp_path / "llm-train-a.yaml"
    bp.write_text(BP)
    env = aws_env(aws.endpoint, ssh_env(slurm, tmp_path))
    gpus, extra = series()
    with prometheus(gpus, tmp_path / "prom", series=extra) as url:
        doc = heal(url, bp, env, tmp_path / "state", "--apply")
    (c,) = doc["clusters"]
    assert "not_acted_on" not in c or not c["not_acted_on"], c
    (act,) = c["actions"]
    assert (act["node"], act["action"], act["status"]) == (NODES[0], "replace", "failed"), act
    assert act["why"] == "draining: not a node of the controller's Slurm (sinfo knows none)", act
    # Nothing destroyed: the node Slurm did not drain still runs.
    assert aws.states(list(ids.values())) == dict.fromkeys(ids.values(), "running")
    calls = fake_ssh.calls(tmp_path / "ssh.log")
    tunnel = f"aws ec2-instance-connect open-tunnel --region {REGION} --instance-id {ids[CTL]}"
    assert calls and all(c.config("ProxyCommand") == tunnel for c in calls), calls
    assert all((c.user, c.host) == ("ubuntu", ctl_ip) for c in calls), calls


def test_a_serving_groups_failed_node_is_replaced_through_its_group_and_only_it(aws, tmp_path):
    """No scheduler: nothing to drain, so only `replace` acts (the group launches the
    successor, which configures itself at boot); a node whose action needs a drain is left,
    and said so. A dry run first destroys nothing."""
    group = "llm-serve-a-dev-serve-l40s"
    a, b, c, d = sorted(aws.group(group, "llm-serve-a", 4, env="dev"))
    other = aws.launch("llm-serve-a", 1, env="staging")[0]  # the same cluster's other stack
    bp = tmp_path / "llm-serve-a.yaml"
    bp.write_text(SERVE)
    labels = ((L.CLUSTER, "llm-serve-a"), (L.ENVIRONMENT, "dev"), (L.PURPOSE, "inference"))
    gpus = [
        Gpu("llm-serve-a", "dev", "inference", n, g, 60.0) for n in (a, b, c, d) for g in range(4)
    ]
    xids = [
        Series(L.XID_ERRORS, (*labels, (L.NODE, n), (L.GPU, "0")),
               lambda i, t, x=x: x if 5 <= i <= 9 else 0)
        for n, x in ((a, 79), (b, 48))
    ]  # fmt: skip
    env = aws_env(aws.endpoint, dict(os.environ))
    with prometheus(gpus, tmp_path / "prom", series=xids) as url:
        dry = heal(url, bp, env, tmp_path / "state")
        assert set(aws.states([a, b, c, d]).values()) == {"running"}  # a dry run
        assert {v["node"]: v["action"] for v in dry["clusters"][0]["nodes"]} == {
            a: "replace", b: "reboot", c: "none", d: "none"
        }  # fmt: skip
        doc = heal(url, bp, env, tmp_path / "state", "--apply")
    (cl,) = doc["clusters"]
    assert [(x["node"], x["status"]) for x in cl["actions"]] == [(a, "replaced")], cl
    assert cl["not_acted_on"] == (
        "heal drains nodes through Slurm and the blueprint declares no scheduler "
        f"(not acted on: {b})"
    )
    states = aws.states([a, b, c, d, other])
    assert states == {a: "terminated", **dict.fromkeys((b, c, d, other), "running")}
    assert aws.describe_group(group)["DesiredCapacity"] == 4
