"""The slurm role's configuration files, rendered by Ansible's own template engine from the role's
templates, defaults and private vars and a compiled blueprint's variables, with what each node
would report (`slurmd -C`, its address and host name) as the role's facts task sets it. No VM:
what needs one (the daemons, sinfo, srun) is tests/e2e/test_slurm_vms.py."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from blueprint_helpers import BARE_METAL, SLURM_MIXED
from gpu_collection import COLLECTIONS_ROOT, ROLES_DIR

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.model import thaw

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROLES_DIR / "slurm"
FILES = ("slurm.conf", "gres.conf", "topology.conf", "cgroup.conf", "prolog.sh", "task_prolog.sh")
DB_PASSWORD = "pw4slurmdbdInTests"
HW = {"CPUs": "224", "Boards": "1", "SocketsPerBoard": "2", "CoresPerSocket": "56",
      "ThreadsPerCore": "2", "RealMemory": "2063000"}  # fmt: skip


def templar(
    blueprint: Path, host: str | None = None, env: str | None = None, lost: Sequence[str] = ()
) -> Templar:
    """Ansible's templar with the role's variables on `host` (default the controller), and each
    host's facts as tasks/facts.yml sets them: a node's address, host name and `slurmd -C`
    hardware; a controller that is no node (AWS) its address and host name only. `lost`: hosts
    that failed or were unreachable earlier in the run (out of the play, nothing reported)."""
    variables = compile_effective(load_effective(blueprint, env)).group_vars
    loader = DataLoader()
    v = {
        **loader.load_from_file(str(ROLE / "defaults" / "main.yml"), trusted_as_template=True),
        **thaw(variables),
        **loader.load_from_file(str(ROLE / "vars" / "main.yml"), trusted_as_template=True),
    }
    names = [n["name"] for n in v["slurm_nodes"]]
    hostvars = {
        name: {"_slurm_node": {"address": f"10.9.0.{i}", "hostname": f"{name}.lab", "hardware": HW}}
        for i, name in enumerate(names, 1)
    }
    controller = [] if v["slurm_controller"] in names else [v["slurm_controller"]]
    for name in controller:  # as an EC2 instance names itself: ip-<its address>
        hostvars[name] = {
            "_slurm_node": {"address": "10.9.9.9", "hostname": "ip-10-9-9-9", "hardware": {}}
        }
    play = names + controller
    for name in lost:
        hostvars[name] = {}
    v |= {
        "hostvars": hostvars,
        "inventory_hostname": host or v["slurm_controller"],
        "ansible_managed": "Ansible managed",
        "ansible_check_mode": False,
        "ansible_play_hosts_all": play,
        "ansible_play_hosts": [h for h in play if h not in lost],
        "groups": {"all": play, "gpu_nodes": names, "slurm_controller": controller},
        # What tasks/accounting.yml reads from the controller's password file (slurp: base64).
        "_slurm_db_password": {"content": base64.b64encode(DB_PASSWORD.encode()).decode()},
    }
    return Templar(loader=loader, variables=v)


def render(blueprint: Path, host: str | None = None, env: str | None = None) -> dict[str, str]:
    """Each file as the role writes it on `host` (default the controller)."""
    t = templar(blueprint, host, env)
    out = {}
    for name in (*FILES, "slurmd.default", "rackform-spot-agent.service", "slurmdbd.conf"):
        text = (ROLE / "templates" / f"{name}.j2").read_text(encoding="utf-8")
        out[name] = t.template(trust_as_template(text))
    return out


def role_var(t: Templar, name: str):
    """A role variable as the role evaluates it on the templar's host."""
    return t.template(trust_as_template("{{ " + name + " }}"))


def lines(text: str, prefix: str) -> list[dict[str, str]]:
    """The `Key=Value ...` lines that start with `prefix`, as dicts."""
    return [
        dict(word.split("=", 1) for word in line.split())
        for line in text.splitlines()
        if line.startswith(prefix)
    ]


@pytest.fixture(scope="module")
def example():
    return render(ROOT / "blueprints" / "baremetal-slurm.yaml")


def test_slurm_conf_has_the_clusters_nodes_with_what_they_report(example):
    conf = example["slurm.conf"]
    assert "ClusterName=dc2-train" in conf
    assert "SlurmctldHost=hgx-01.lab(10.9.0.1)" in conf  # the controller's host name and address
    nodes = lines(conf, "NodeName=")
    assert [n["NodeName"] for n in nodes] == ["hgx-01", "hgx-02", "hgx-03", "hgx-04"]
    first = nodes[0]
    assert first["NodeAddr"] == "10.9.0.1"
    assert (first["CPUs"], first["SocketsPerBoard"], first["CoresPerSocket"]) == ("224", "2", "56")
    assert first["RealMemory"] == str(int(2063000 * 0.97))  # headroom, so it never drains
    assert all(n["Gres"] == "gpu:h100_sxm:8" for n in nodes)
    for key, value in [("SelectType", "select/cons_tres"), ("GresTypes", "gpu"),
                       ("ProctrackType", "proctrack/cgroup"), ("TaskPlugin", "task/cgroup,task/affinity"),
                       ("PreemptType", "preempt/partition_prio"), ("PreemptMode", "REQUEUE"),
                       ("TopologyPlugin", "topology/tree"), ("AuthType", "auth/munge")]:  # fmt: skip
        assert f"\n{key}={value}\n" in conf, key


def test_partitions_carry_tiers_preemption_and_limits(example):
    parts = {p["PartitionName"]: p for p in lines(example["slurm.conf"], "PartitionName=")}
    assert parts["batch"] | {} == {
        "PartitionName": "batch", "Nodes": "hgx-01,hgx-02,hgx-03,hgx-04", "Default": "YES",
        "PriorityTier": "10", "MaxTime": "4320", "PreemptMode": "OFF",
        "TRESBillingWeights": "GRES/gpu=1.0", "State": "UP",  # the example has fairness
    }  # fmt: skip
    assert parts["scavenger"]["Default"] == "NO"
    assert parts["scavenger"]["PriorityTier"] == "1"
    assert parts["scavenger"]["MaxTime"] == "INFINITE"
    assert (parts["scavenger"]["PreemptMode"], parts["scavenger"]["GraceTime"]) == (
        "REQUEUE",
        "120",
    )


def test_gres_and_topology_come_from_the_blueprint(example):
    gres = lines(example["gres.conf"], "NodeName=")
    assert [(g["NodeName"], g["Type"], g["File"]) for g in gres] == [
        (f"hgx-0{i}", "h100_sxm", "/dev/nvidia[0-7]") for i in range(1, 5)
    ]
    switches = lines(example["topology.conf"], "SwitchName=")
    assert switches == [
        {"SwitchName": "rack-r1", "Nodes": "hgx-01,hgx-02"},
        {"SwitchName": "rack-r2", "Nodes": "hgx-03,hgx-04"},
        {"SwitchName": "root", "Switches": "rack-r1,rack-r2"},
    ]
    cgroup = dict(line.split("=") for line in example["cgroup.conf"].splitlines() if "=" in line)
    assert cgroup == {
        "ConstrainCores": "yes",
        "ConstrainRAMSpace": "yes",
        "ConstrainDevices": "yes",
    }


def test_jobs_get_a_checkpoint_directory_on_the_mount(example):
    assert (
        "Prolog=/etc/slurm/prolog.sh\nTaskProlog=/etc/slurm/task_prolog.sh" in example["slurm.conf"]
    )
    assert '"/mnt/checkpoints/slurm/$SLURM_JOB_ID"' in example["prolog.sh"]
    assert (
        "export RACKFORM_CHECKPOINT_DIR=/mnt/checkpoints/slurm/$SLURM_JOB_ID"
        in example["task_prolog.sh"]
    )


def test_finished_jobs_are_recorded_and_a_requeued_job_waits_out_its_credentials(example):
    conf = example["slurm.conf"]
    # One line per finished job (jobcomp/filetxt), the records per-job telemetry reads.
    assert "\nJobCompType=jobcomp/filetxt\nJobCompLoc=/var/log/slurm/jobcomp.log\n" in conf
    # Slurm's own default, written out: it is also how long a requeued job waits to restart.
    assert "\nAuthInfo=cred_expire=120\n" in conf


def test_the_spot_agent_watches_the_metadata_service_for_its_own_node(example):
    unit = example["rackform-spot-agent.service"]
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert start.split("=", 1)[1].split() == [
        "/usr/bin/python3", "/usr/local/lib/rackform_spot_agent.py", "--node", "hgx-01",
        "--imds", "http://169.254.169.254", "--interval-s", "5", "--requeue-after-s", "60",
    ]  # fmt: skip
    assert "Restart=always" in unit and "After=network-online.target slurmd.service" in unit


def test_a_host_without_gpus_has_no_gres_and_every_node_gets_the_same_files(write):
    bp = write(SLURM_MIXED)
    on = {h: render(bp, h) for h in ("n1", "c1")}
    assert {f: on["n1"][f] for f in FILES} == {f: on["c1"][f] for f in FILES}  # one config
    assert on["n1"]["slurmd.default"] == on["c1"]["slurmd.default"].replace("c1", "n1")
    conf = on["c1"]
    assert [g["NodeName"] for g in lines(conf["gres.conf"], "NodeName=")] == ["n1", "n2"]
    nodes = {n["NodeName"]: n for n in lines(conf["slurm.conf"], "NodeName=")}
    assert "Gres" not in nodes["c1"] and nodes["n1"]["Gres"] == "gpu:h100_sxm:8"
    assert "SlurmctldHost=c1.lab(10.9.0.3)" in conf["slurm.conf"]
    spare = lines(conf["slurm.conf"], "PartitionName=spare")[0]
    assert (spare["Nodes"], spare["MaxTime"], spare["GraceTime"]) == ("n1,n2,c1", "60", "45")
    # No racks: one switch, no root.
    assert lines(conf["topology.conf"], "SwitchName=") == [
        {"SwitchName": "cluster", "Nodes": "n1,n2,c1"}
    ]


def test_a_single_gpu_is_one_device_file(write):
    bp = write(BARE_METAL.replace("gpus_per_node: 8", "gpus_per_node: 1").replace("gpu: H100-SXM", "gpu: L4")
               + "scheduler: {type: slurm, controller: n1, partitions: [{name: p, node_groups: [hgx], default: true}]}\n")  # fmt: skip
    gres = lines(render(bp)["gres.conf"], "NodeName=")
    assert [(g["Type"], g["File"]) for g in gres] == [("l4", "/dev/nvidia0")] * 2


def test_a_site_run_without_a_scheduler_skips_the_slurm_role_cleanly(tmp_path):
    # With no scheduler (no controller) the site playbook still runs, and its Slurm play has
    # no host (check mode, slurm tag only, on this machine through a local connection: no slurm
    # task even looked at, nothing touched).
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))  # fmt: skip
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS_ROOT)}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
         "rackform.gpu.site", "--tags", "slurm", "--check"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "failed=0" in done.stdout and "rackform.gpu.slurm" not in done.stdout, done.stdout
    slurm = done.stdout.split("PLAY [Run Slurm on the nodes and its controller]")[1]
    assert slurm.split("*\n", 1)[1].strip().startswith("skipping: no hosts matched")


# An AWS training cluster on spot capacity with hyphenated names: the stack's own controller
# instance (llm-train-a-dev-slurmctld) is no node.
AWS_SLURM = """
name: llm-train-a
purpose: training
owner: team@example.com
target:
  type: aws
  region: us-east-1
  availability_zone: us-east-1a
  market: spot
  ami: {image: ubuntu-24.04}
node_groups:
  - {name: gpu-a, instance_type: p5.48xlarge, count: 2}
network: {fabric: efa}
workload: {model_params_b: 7, method: full, checkpoint_interval_min: 30}
scheduler:
  type: slurm
  partitions:
    - {name: batch, node_groups: [gpu-a], default: true}
environments:
  dev: {}
"""
CTL = "llm-train-a-dev-slurmctld"
AWS_NODES = ["llm-train-a-dev-gpu-a-0", "llm-train-a-dev-gpu-a-1"]


def test_a_controller_that_is_no_node_is_slurmctld_host_and_in_no_node_line(write):
    bp = write(AWS_SLURM)
    on = {h: render(bp, h, "dev") for h in (CTL, *AWS_NODES)}
    conf = on[CTL]["slurm.conf"]
    assert "SlurmctldHost=ip-10-9-9-9(10.9.9.9)" in conf
    assert [n["NodeName"] for n in lines(conf, "NodeName=")] == AWS_NODES
    assert lines(conf, "PartitionName=")[0]["Nodes"] == ",".join(AWS_NODES)
    assert CTL not in conf  # in no node line, partition or switch
    assert CTL not in on[CTL]["topology.conf"]
    # The same slurm.conf and topology.conf on the controller and on every node.
    for node in AWS_NODES:
        assert on[node]["slurm.conf"] == conf
        assert on[node]["topology.conf"] == on[CTL]["topology.conf"]


def test_a_controller_that_is_no_node_gets_slurmctld_only(write):
    bp = write(AWS_SLURM)
    ctl, node = templar(bp, CTL, "dev"), templar(bp, AWS_NODES[0], "dev")
    assert role_var(ctl, "slurm_controller_is_node") is False
    assert role_var(ctl, "_slurm_packages") == ["munge", "slurm-client", "slurmctld"]
    assert role_var(node, "_slurm_packages") == ["munge", "slurm-client", "slurmd"]
    assert role_var(ctl, "_slurm_files") == ["slurm.conf", "topology.conf"]
    assert role_var(node, "_slurm_files") == [
        "slurm.conf",
        "gres.conf",
        "topology.conf",
        "cgroup.conf",
    ]
    assert (
        role_var(ctl, "_slurm_is_node") is False and role_var(ctl, "_slurm_is_controller") is True
    )
    # Spot capacity: the agent on the nodes, never on the controller (bought on demand).
    assert role_var(node, "_slurm_spot_agent") is True
    assert role_var(ctl, "_slurm_spot_agent") is False
    # The controller and the nodes together are the whole cluster: not a partial (--limit) run.
    assert role_var(ctl, "_slurm_partial") is False
    assert sorted(role_var(ctl, "slurm_cluster_hosts")) == sorted([CTL, *AWS_NODES])
    assert role_var(ctl, "_slurm_known") is True


def _tasks(name: str) -> list[dict]:
    return yaml.safe_load((ROLE / "tasks" / name).read_text(encoding="utf-8"))


def _runs(t: Templar, task: dict) -> bool:
    """Whether a task's `when` holds on the templar's host."""
    when = task.get("when", [])
    return all(role_var(t, f"({c})") for c in (when if isinstance(when, list) else [when]))


# What needs the whole cluster's reports: slurm.conf and the accounting that registers the
# cluster, the daemons, and the wait for every node to take jobs.
CLUSTER_WIDE = {
    "main.yml": [
        "Write Slurm's configuration",
        "Run MariaDB and slurmdbd and register the cluster (slurm_accounting), before slurmctld",
    ],
    "services.yml": [
        "Run slurmctld on the controller",
        "Run slurmd on every node",
        "Wait until every node is registered and takes jobs",
    ],
}


@pytest.mark.parametrize("host", ["hgx-01", "hgx-02"])
def test_a_node_lost_earlier_leaves_slurm_as_it_is_and_names_it(host):
    # hgx-03 failed (or was unreachable) in an earlier play of the run: the others still get
    # what is their own, and nothing cluster-wide is written or started from part of the
    # cluster; the role says which node it lacks, and no task fails for it.
    bp = ROOT / "blueprints" / "baremetal-slurm.yaml"
    whole, lost = templar(bp, host), templar(bp, host, lost=["hgx-03"])
    assert role_var(lost, "_slurm_lost") == ["hgx-03"]
    assert role_var(lost, "_slurm_known") is False and role_var(lost, "_slurm_partial") is False
    assert role_var(whole, "_slurm_lost") == [] and role_var(whole, "_slurm_known") is True
    # Two lost: in the play's order (a set's order changes from run to run).
    assert role_var(templar(bp, host, lost=["hgx-04", "hgx-03"]), "_slurm_lost") == [
        "hgx-03", "hgx-04",
    ]  # fmt: skip
    for name, wanted in CLUSTER_WIDE.items():
        found = {t["name"]: t for t in _tasks(name) if t["name"] in wanted}
        assert sorted(found) == sorted(wanted)
        on = host == "hgx-01"  # the controller: its own daemon and accounting
        for task in found.values():
            if "slurmctld" in task["name"] or "slurmdbd" in task["name"]:
                assert _runs(whole, task) is on, task["name"]
            else:
                assert _runs(whole, task) is True, task["name"]
            assert _runs(lost, task) is False, task["name"]
    say = next(t for t in _tasks("main.yml") if t["name"].startswith("Say why Slurm"))
    assert _runs(lost, say) and not _runs(whole, say)
    msg = lost.template(trust_as_template(say["ansible.builtin.debug"]["msg"]))
    assert msg.startswith("hgx-03 failed or was unreachable earlier in this run, so it reports"), (
        msg
    )
    assert "left as they are until a run reaches it" in msg
    # The munge key still goes to every node from the controller, which is there.
    munge = next(t for t in _tasks("main.yml") if t["name"].startswith("Give every node"))
    assert _runs(lost, munge) is True


def test_a_controller_lost_earlier_hands_out_no_munge_key():
    bp = ROOT / "blueprints" / "baremetal-slurm.yaml"
    t = templar(bp, "hgx-02", lost=["hgx-01"])
    munge = next(x for x in _tasks("main.yml") if x["name"].startswith("Give every node"))
    assert _runs(t, munge) is False
    say = next(x for x in _tasks("main.yml") if x["name"].startswith("Say why Slurm"))
    assert t.template(trust_as_template(say["ansible.builtin.debug"]["msg"])).startswith(
        "hgx-01 failed or was unreachable earlier"
    )


def test_on_bare_metal_the_controller_is_still_a_node(write):
    t = templar(ROOT / "blueprints" / "baremetal-slurm.yaml")
    assert role_var(t, "slurm_controller_is_node") is True
    # The example declares fairness: its controller keeps Slurm's accounting database too.
    assert role_var(t, "_slurm_packages") == [
        "munge", "slurm-client", "slurmd", "slurmctld", "mariadb-server", "slurmdbd",
    ]  # fmt: skip
    assert role_var(t, "_slurm_files") == [
        "slurm.conf",
        "gres.conf",
        "topology.conf",
        "cgroup.conf",
    ]
    assert role_var(t, "slurm_cluster_hosts") == ["hgx-01", "hgx-02", "hgx-03", "hgx-04"]


def test_site_runs_the_slurm_role_on_the_controller_and_nothing_else_there(tmp_path):
    # The inventory rackform builds for an AWS cluster with Slurm: nodes in gpu_nodes, the
    # stack's controller instance in slurm_controller. Ansible's own --list-hosts says which
    # hosts each play of the site playbook runs on (nothing is run or contacted). The playbook's
    # first play groups every host that answered, and every host for Slurm and the smoke job (a
    # training cluster with a scheduler; which hosts it groups when: test_the_site_playbook_
    # runs_slurm_and_the_smoke_job_only_where_they_belong); --list-hosts runs no task, so the
    # groups are given here as that play leaves them, with the controller in all three: the
    # plays' own patterns keep it out of everything but Slurm's.
    every = {n: {} for n in [*AWS_NODES, CTL]}
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"children": {
        "gpu_nodes": {"children": {"ng_gpu_a": {"hosts": {n: {} for n in AWS_NODES}}}},
        "slurm_controller": {"hosts": {CTL: {}}},
        "rackform_slurm": {"hosts": every}, "rackform_smoke_train": {"hosts": every},
        "rackform_answered": {"hosts": every}}}}))  # fmt: skip
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS_ROOT)}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
         "rackform.gpu.site", "--list-hosts"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    plays: dict[str, set[str]] = {}
    current = ""
    for line in done.stdout.splitlines():
        if line.strip().startswith("play #"):
            current = line.split(": ", 1)[1].split("\t")[0].strip()
            plays[current] = set()
        elif current and line.startswith("      ") and line.strip():
            plays[current].add(line.strip())
    assert plays == {
        "Wait for every node to answer": {CTL, *AWS_NODES},
        "Converge the GPU nodes": set(AWS_NODES),
        # No rack-scale NVLink domain here: no host is grouped for IMEX.
        "Run IMEX on the trays of rack-scale NVLink domains": set(),
        # A training cluster's: no host is grouped for the serving smoke job's torch.
        "Install the serving smoke job's torch on a serving cluster's nodes": set(),
        "Write the cluster's Prometheus scrape config": set(AWS_NODES),
        "Mount the shared tier on the nodes": set(AWS_NODES),
        "Run Slurm on the nodes and its controller": {CTL, *AWS_NODES},
        "Validate the GPU nodes with the smoke job": set(AWS_NODES),
    }


def test_the_site_playbook_runs_slurm_and_the_smoke_job_only_where_they_belong(tmp_path):
    # An inference cluster is never validated by the training job: the site playbook's smoke
    # job play has no host there, and its nodes get the smoke job's torch environment alone (for
    # the serving smoke job), under the smoke_train tag a bake runs: so an inference bake holds
    # the torch its image record names. On this machine through a local connection in check
    # mode. A training cluster's run reaches the role, and never the serving torch play.
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))  # fmt: skip
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS_ROOT)}

    def site(purpose: str, slurm: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
             "rackform.gpu.site", "--tags", "smoke_train,slurm", "--check",
             "-e", f"rackform_purpose={purpose}", "-e", "smoke_train_validators_src=/nonexistent",
             "-e", f"slurm_enabled={str(slurm).lower()}"],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip

    def results(proc: subprocess.CompletedProcess, role: str, task: str = "") -> list[str]:
        """The first word of each result line of every task of `role` (named `task...`, where
        given) that ran."""
        blocks = proc.stdout.split("\nTASK [")[1:]
        return [
            line.split(":")[0]
            for b in blocks
            if b.startswith(f"rackform.gpu.{role} : {task}")
            for line in b.splitlines()[1:]
            if line.startswith(("ok:", "changed:", "skipping:", "fatal:"))
        ]

    def no_hosts(proc: subprocess.CompletedProcess, play: str) -> bool:
        body = proc.stdout.split(f"PLAY [{play}]")[1].split("\nPLAY ")[0]
        return body.split("*\n", 1)[1].strip().startswith("skipping: no hosts matched")

    serving = site("inference")
    assert serving.returncode == 0, serving.stdout[-3000:] + serving.stderr[-2000:]
    assert results(serving, "slurm") == [], serving.stdout
    torch = "Install torch and the job's other packages into the virtualenv"
    assert results(serving, "smoke_train", torch) == ["changed"], serving.stdout
    # ...and nothing of the training job: the role's own checks and run are never reached.
    assert results(serving, "smoke_train", "Preflight") == [], serving.stdout
    assert no_hosts(serving, "Validate the GPU nodes with the smoke job"), serving.stdout
    assert no_hosts(serving, "Run Slurm on the nodes and its controller"), serving.stdout
    # A training cluster's run reaches the smoke job's role (its preflight runs, and here fails:
    # no validators where this run says they are); with a scheduler, Slurm's too (its preflight
    # fails on this host: no controller named).
    training = site("training")
    assert set(results(training, "smoke_train")) - {"skipping"}
    assert no_hosts(training, "Install the serving smoke job's torch on a serving cluster's nodes")
    scheduled = site("training", slurm=True)
    assert set(results(scheduled, "slurm")) - {"skipping"}
    # Grouping the hosts changes nothing on them: no change for a second converge or for
    # `rackform drift` (check mode) to count. A training cluster's host (an HGX node here) is
    # in every group but IMEX's and the serving one.
    grouped = [b for b in scheduled.stdout.split("\nTASK [")[1:] if b.startswith("Group ")]
    assert len(grouped) == 5 and not any("\nchanged:" in b for b in grouped), grouped
    skipped = [b for b in grouped if "\nok: [localhost]" not in b]
    assert [b.split("]")[0] for b in skipped] == [
        "Group the trays of rack-scale NVLink domains for IMEX (rackform_imex)",
        "Group a serving cluster's nodes for the serving smoke job's torch (rackform_serving)",
    ]


def _with_storage(tmp_path: Path, extra: str) -> Path:
    """The Slurm example with `extra` (YAML lines under storage:) added."""
    text = (ROOT / "blueprints" / "baremetal-slurm.yaml").read_text(encoding="utf-8")
    text = text.replace("storage:\n", f"storage:\n{extra}", 1)
    path = tmp_path / "dc2-train.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _task_env(prolog: str, tmp_path: Path) -> dict[str, str]:
    """What the task prolog puts in a task's environment, as slurmd reads its output."""
    script = tmp_path / "task_prolog.sh"
    script.write_text(prolog, encoding="utf-8")
    out = subprocess.run(
        ["sh", str(script)], env={"SLURM_JOB_ID": "4242", "PATH": os.environ["PATH"]},
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines())


def test_each_job_gets_its_place_on_the_object_tier(tmp_path):
    bp = _with_storage(
        tmp_path, "  object: {url: s3://dc2-ckpt/train/, endpoint_url: 'https://s3.dc2.lab:9000'}\n"
    )
    env = _task_env(render(bp)["task_prolog.sh"], tmp_path)
    assert env == {
        "RACKFORM_CHECKPOINT_DIR": "/mnt/checkpoints/slurm/4242",
        "RACKFORM_CHECKPOINT_TIER": "s3://dc2-ckpt/train/4242",
        # The workload's checkpoints_retained (the schema's default): what sizes the array and
        # prices the tier is what the job keeps.
        "RACKFORM_CHECKPOINT_KEEP": "3",
        "AWS_ENDPOINT_URL_S3": "https://s3.dc2.lab:9000",
    }


def test_a_shared_tier_that_holds_checkpoints_takes_the_copies(tmp_path):
    text = (ROOT / "blueprints" / "baremetal-slurm.yaml").read_text(encoding="utf-8")
    path = tmp_path / "dc2-train.yaml"
    path.write_text(
        text.replace("holds: [datasets, home]", "holds: [datasets, home, checkpoints]").replace(
            "  checkpoint_interval_min: 30\n",
            "  checkpoint_interval_min: 30\n  checkpoints_retained: 5\n",
        ),
        encoding="utf-8",
    )
    env = _task_env(render(path)["task_prolog.sh"], tmp_path)
    assert env["RACKFORM_CHECKPOINT_TIER"] == "/shared/checkpoints/4242"
    assert env["RACKFORM_CHECKPOINT_KEEP"] == "5"
    assert "AWS_ENDPOINT_URL_S3" not in env


def test_without_a_tier_a_job_gets_only_its_directory(example, tmp_path):
    assert _task_env(example["task_prolog.sh"], tmp_path) == {
        "RACKFORM_CHECKPOINT_DIR": "/mnt/checkpoints/slurm/4242"
    }


def test_topology_conf_is_the_plans_where_declared_and_the_racks_otherwise(example, tmp_path):
    """The role writes topology.conf as `slurm_topology.topology_conf` writes it: for a
    blueprint with no topology, byte for byte the racks' tree it always wrote (so existing
    clusters do not change); for NVL72 racks, their blocks, with TopologyPlugin=topology/block."""
    from topology_bp import nvl72_site, write

    from rackform.plan.slurm_topology import topology_conf

    plan = compile_effective(load_effective(ROOT / "blueprints" / "baremetal-slurm.yaml"))
    assert example["topology.conf"] == "# Ansible managed\n" + topology_conf(plan.topology).text
    site = write(tmp_path, nvl72_site(racks=2))
    conf = render(site)
    text = topology_conf(compile_effective(load_effective(site)).topology).text
    assert conf["topology.conf"] == "# Ansible managed\n" + text
    assert "BlockName=nvl-r2 Nodes=gb2-t01," in text
    assert lines(conf["slurm.conf"], "TopologyPlugin=") == [{"TopologyPlugin": "topology/block"}]


def test_the_workloads_min_nodes_reaches_each_task_as_rackform_min_nodes(tmp_path):
    text = (ROOT / "blueprints" / "baremetal-slurm.yaml").read_text(encoding="utf-8")
    path = tmp_path / "dc2-elastic.yaml"
    path.write_text(
        text.replace(
            "  checkpoint_interval_min: 30\n", "  checkpoint_interval_min: 30\n  min_nodes: 1\n"
        ),
        encoding="utf-8",
    )
    env = _task_env(render(path)["task_prolog.sh"], tmp_path)
    assert env["RACKFORM_MIN_NODES"] == "1"
