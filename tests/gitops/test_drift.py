"""`rackform drift`: the host-level reading of the roles' check-mode run, the host level over an
AWS cluster's running instances (moto's server), and the resource level through the Automation
API against the recording `pulumi` stand-in (stand_ins.py; this machine has no Pulumi CLI). The
host level on real hosts is tests/e2e/test_drift_vms.py; a new target's, through its runtime's
`nodes`, tests/engine/test_new_target.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import stand_ins
from moto_server import aws_env

from rackform.gitops.hostdrift import Collector
from rackform.push.progress import Progress

ROOT = Path(__file__).resolve().parents[2]


def event(kind, host="", role="", task="", res=None, action="ansible.builtin.template"):
    data = {"host": host, "role": role, "task": task, "task_action": action, "res": res or {}}
    return {"event": kind, "event_data": data}


def test_the_check_mode_display_reads_back_as_drift_per_host_and_role():
    """The runner's live display (what `configure --check --diff` prints) is what the collector
    reads: a changed task with its diff is repairable, a failed one needs a person."""
    collector = Collector()
    progress = Progress(collector)
    nccl = "Write /etc/nccl.conf"
    diff = {"before": "NCCL_IB_DISABLE=1\nNCCL_DEBUG=TRACE\n", "after": "NCCL_IB_DISABLE=1\n",
            "before_header": "/etc/nccl.conf", "after_header": "/etc/nccl.conf"}  # fmt: skip
    for e in [
        {"event": "playbook_on_play_start", "event_data": {"play": "site"}},
        event("playbook_on_task_start", role="nccl_rdma", task=nccl),
        event("runner_on_ok", "node1", "nccl_rdma", nccl, {"changed": True, "diff": diff}),
        event("runner_on_ok", "node2", "nccl_rdma", nccl, {"changed": False}),
        event("playbook_on_task_start", role="nvme_raid", task="Check the array"),
        event(
            "runner_on_failed",
            "node2",
            "nvme_raid",
            "Check the array",
            {"msg": "/dev/md/checkpoints is not healthy (state broken)"},
        ),
        event(
            "runner_on_unreachable",
            "node3",
            "nvme_raid",
            "Check the array",
            {"msg": "ssh: connect to host timed out"},
        ),
    ]:
        progress(e)
    got = [(i.host, i.role, i.task, i.kind) for i in collector.items]
    assert got == [
        ("node1", "nccl_rdma", nccl, "repairable"),
        ("node2", "nvme_raid", "Check the array", "needs a person"),
        ("node3", "nvme_raid", "Check the array", "unreachable"),
    ]
    assert "-NCCL_DEBUG=TRACE" in collector.items[0].detail
    assert collector.items[1].detail == ["/dev/md/checkpoints is not healthy (state broken)"]


def stand_in(tmp_path, **extra):
    bin_dir = tmp_path / "bin"
    stand_ins.install(bin_dir)
    return stand_ins.fake_pulumi.environ(bin_dir, tmp_path, **extra)


def test_resource_drift_is_a_refresh_in_preview_mode(rackform, tmp_path):
    urn = (
        "urn:pulumi:llm-train-a-dev::rackform::rackform:aws:NodeGroup$aws:ec2/instance:Instance"
        "::llm-train-a-dev-gpu-0"
    )
    env = stand_in(tmp_path, FAKE_DRIFT_URNS=f"update={urn}")
    proc = rackform("drift", "blueprints/aws-training.yaml", "--env", "dev", "--json",
                    cwd=ROOT, env=env)  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["resources"] == [
        {"urn": urn, "type": "aws:ec2/instance:Instance", "op": "update", "properties": ["gpus"]}
    ]
    assert doc["hosts"] == []  # AWS nodes come from the stack: no host-level run by default
    refresh = [a for a in stand_ins.calls(tmp_path) if "refresh" in a]
    assert refresh and "--preview-only" in refresh[0]
    assert refresh[0][refresh[0].index("--stack") + 1] == "llm-train-a-dev"
    text = rackform("drift", "blueprints/aws-training.yaml", "--env", "dev", cwd=ROOT, env=env)
    assert text.returncode == 3 and f"resource update {urn}: gpus" in text.stdout

    clean = rackform("drift", "blueprints/aws-training.yaml", "--env", "dev", cwd=ROOT,
                     env=stand_in(tmp_path / "clean"))  # fmt: skip
    assert clean.returncode == 0, clean.stderr
    assert "no drift (resources checked)" in clean.stdout


def test_without_the_pulumi_cli_the_resource_level_says_so(rackform, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")}
    env["PATH"] = str(Path(os.sys.executable).parent) + os.pathsep + "/usr/bin:/bin"
    proc = rackform("drift", "blueprints/baremetal-training.yaml", "--resources", "--no-hosts",
                    cwd=ROOT, env=env)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("rackform: drift --resources: the pulumi CLI is not on PATH")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_host_drift_on_aws_checks_the_instances_running_now(rackform, aws):
    """Where the stack creates the nodes, the host level runs over the ones its runtime lists
    (AWS: the cluster's running instances by its tags, moto's server here), each reached
    through the stack's endpoint tunnel; no AWS CLI here, so each is named unreachable."""
    bp = "blueprints/aws-training.yaml"
    env = aws_env(
        aws.endpoint, {**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    )
    args = ("drift", bp, "--env", "dev", "--hosts", "--no-resources")
    none = rackform(*args, cwd=ROOT, env=env)
    assert none.returncode == 2
    assert none.stderr.startswith(
        f"rackform: {bp}: host level: no node of cluster llm-train-a (dev) is running; "
        "use --resources"
    )
    node = "llm-train-a-dev-gpu-0"  # dev runs one node
    aws.launch("llm-train-a", 1, env="dev", tags={"Name": node})
    aws.launch("llm-train-a", 1, env="staging", tags={"Name": node})  # not this environment's
    proc = rackform(*args, "--json", cwd=ROOT, env=env)
    assert proc.returncode == 3, proc.stderr
    hosts = json.loads(proc.stdout)["hosts"]
    assert [(i["host"], i["kind"]) for i in hosts] == [(node, "unreachable")], hosts
    assert "exec: aws: not found" in hosts[0]["detail"][0]  # ssh went through the tunnel


def test_host_drift_is_refused_where_the_runtime_cannot_list_the_nodes(monkeypatch):
    """A target whose stack creates its nodes but whose runtime lists none of them: the host
    level says so in one line, and points at the resource level."""
    from typer.testing import CliRunner

    from rackform.cli.main import app
    from rackform.targets.aws.runtime import AwsRuntime
    from rackform.targets.runtime import TargetRuntime
    from rackform.targets.runtimes import RUNTIMES

    unlisting = type("Unlisting", (AwsRuntime,), {"nodes": TargetRuntime.nodes})()
    monkeypatch.setitem(RUNTIMES, "aws", unlisting)
    bp = str(ROOT / "blueprints/aws-training.yaml")
    got = CliRunner().invoke(app, ["drift", bp, "--env", "dev", "--hosts", "--no-resources"])
    assert got.exit_code == 2
    assert "AWS cannot list the nodes its stack creates; use --resources" in got.output


def test_role_names_a_checked_role(rackform):
    bp = "blueprints/baremetal-training.yaml"
    for args, says in (
        (["--role", "nccl"], "--role nccl: no such role (roles: nvidia_driver, nccl_rdma,"),
        (["--role", "smoke_train"], "--role smoke_train: it runs a job, not a host's state"),
        (["--role", "nccl_rdma", "--no-hosts"], "--role: roles are checked at the host level"),
    ):
        proc = rackform("drift", bp, *args, cwd=ROOT)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith(f"rackform: {says}"), (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1


def test_role_limits_the_check_mode_run_to_those_roles(monkeypatch):
    """The roles reach the runner (the run itself, on real hosts: tests/e2e/test_drift_vms.py)."""
    from rackform.engine import prepare
    from rackform.gitops import hostdrift
    from rackform.push import retries
    from rackform.push.site import site_playbook

    asked = []

    class Done:
        rc = 0

    def run(inventory, group_vars, **kw):  # the Ansible run: here, only what it was asked
        asked.append((kw["roles"], kw["check"], kw["diff"]))
        return Done()

    monkeypatch.setattr(retries, "run", run)
    plan = prepare(ROOT / "blueprints/baremetal-training.yaml").plan
    hostdrift.check(plan, roles=["nvme_raid"])
    hostdrift.check(plan)
    every = [r for r in site_playbook().roles if r != "smoke_train"]
    assert asked == [(["nvme_raid"], True, True), (every, True, True)]


def test_a_hosts_result_is_read_as_its_own_tasks_where_nodes_go_at_their_own_pace():
    """Under `strategy: free` (site.yml's batches) node1 may report on one task after node2
    started the next: the display names the task again, so the collector still reads each
    change and failure as the task's that made it."""
    collector = Collector()
    progress = Progress(collector)
    conf, env = "Write /etc/nccl.conf", "Write /etc/nccl.env"
    for e in [
        {"event": "playbook_on_play_start", "event_data": {"play": "Converge the GPU nodes"}},
        event("playbook_on_task_start", role="nccl_rdma", task=conf),
        event("playbook_on_task_start", role="nccl_rdma", task=env),
        event("runner_on_ok", "node1", "nccl_rdma", conf, {"changed": True}),
        event("runner_on_ok", "node2", "nccl_rdma", env, {"changed": True}),
        event("runner_on_failed", "node3", "nccl_rdma", conf, {"msg": "disk full"}),
    ]:
        progress(e)
    got = [(i.host, i.task, i.kind) for i in collector.items]
    assert got == [
        ("node1", conf, "repairable"),
        ("node2", env, "repairable"),
        ("node3", conf, "needs a person"),
    ]
    assert progress.changed == {"node1": [f"nccl_rdma : {conf}"], "node2": [f"nccl_rdma : {env}"]}
