"""`rackform status`, `jobs` and `reap` on an AWS cluster with Slurm, the real commands: the
controller is an instance the stack created, found by the cluster's tags in EC2 (moto's server on
loopback, through boto3's own AWS_ENDPOINT_URL) and reached through the stack's EC2 Instance
Connect Endpoint with the key and known_hosts file given (the stack's `ssh_access`). ssh is
tests/fake_ssh.py, which logs its argv and runs the controller's commands here, against the
local Slurm (whose nodes are not the AWS cluster's); the tunnel is only named in the argv.

Each command must reach the controller only with the key, the known_hosts file and the tunnel
to the controller's own instance; `status` lists the nodes the stack runs now (from EC2), not
the plan's empty inventory."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from blueprint_helpers import ROOT
from moto_server import CTL, NODES, REGION, aws_env, aws_slurm
from servers import Gpu, prometheus
from slurm_local import ssh_env

BP = aws_slurm(
    "  idle: {gpu_util_below_pct: 10, for_minutes: 60, action: stop, grace_minutes: 0}\n"
)


@pytest.fixture
def cluster(aws, slurm, tmp_path):
    """The stack's instances in moto (node 1 and the controller running; node 0 not yet), the
    blueprint, the key files and the environment the commands run in."""
    ids = {n: aws.launch("llm-train-a", 1, env="dev", tags={"Name": n})[0] for n in (NODES[1], CTL)}
    (key := tmp_path / "id_ed25519").write_text("not read by the fake ssh\n")
    (known := tmp_path / "known_hosts").write_text("* ssh-ed25519 AAAAC3NzaHOST\n")
    bp = tmp_path / "llm-train-a.yaml"
    bp.write_text(BP)
    env = aws_env(aws.endpoint, ssh_env(slurm, tmp_path))
    return bp, env, ids, ["--private-key", str(key), "--known-hosts", str(known)]


def rackform(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "rackform", *map(str, args)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=180,
    )  # fmt: skip


def ssh_calls(tmp_path) -> list[list[str]]:
    log = tmp_path / "ssh.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def through_the_tunnel(calls, ids, access) -> None:
    tunnel = f"ProxyCommand=aws ec2-instance-connect open-tunnel --region {REGION} --instance-id"
    assert calls, "the controller was never reached"
    for argv in calls:
        assert f"{tunnel} {ids[CTL]}" in argv, argv
        assert argv[argv.index("-i") + 1] == access[1], argv
        assert f'UserKnownHostsFile="{access[3]}"' in argv, argv


def test_status_lists_the_nodes_the_stack_runs_and_reads_slurm_through_the_tunnel(
    cluster, tmp_path
):
    bp, env, ids, access = cluster
    p = rackform(env, "status", bp, "--env", "dev", "--json", "--state-dir", tmp_path / "st",
                 *access)  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [n["node"] for n in doc["nodes"]] == [NODES[1]]  # node 0 is not running
    through_the_tunnel(ssh_calls(tmp_path), ids, access)


def test_jobs_reads_the_records_on_the_controller_through_the_tunnel(cluster, tmp_path):
    bp, env, ids, access = cluster
    log = tmp_path / "jobcomp.log"
    log.write_text("")  # no job ended yet
    p = rackform(env, "jobs", bp, "--env", "dev", "--json", "--log", log, *access)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"] == []
    through_the_tunnel(ssh_calls(tmp_path), ids, access)


def test_reap_takes_the_lock_on_the_controller_through_the_tunnel(cluster, tmp_path):
    bp, env, ids, access = cluster
    gpus = [Gpu("llm-train-a", "dev", "training", n, g, 80.0) for n in NODES for g in range(8)]
    with prometheus(gpus, tmp_path / "prom") as url:
        p = rackform(env, "reap", bp, "--env", "dev", "--prometheus", url, "--json",
                     "--state-dir", tmp_path / "reap", *access)  # fmt: skip
    assert p.returncode == 0, p.stderr
    (c,) = json.loads(p.stdout)["clusters"]
    assert c["verdict"] == "busy", c
    through_the_tunnel(ssh_calls(tmp_path), ids, access)


def test_a_controller_ec2_does_not_know_leaves_slurm_unread(cluster, aws, tmp_path):
    bp, env, _ids, access = cluster
    aws.reset()  # no instance at all: the stack is not up
    p = rackform(env, "status", bp, "--env", "dev", "--json", "--state-dir", tmp_path / "st",
                 *access)  # fmt: skip
    assert p.returncode == 3, p.stderr
    doc = json.loads(p.stdout)
    assert doc["error"] == (
        f"no running instance '{CTL}' of cluster llm-train-a (dev) in us-east-1"
    ), doc
    assert ssh_calls(tmp_path) == []
