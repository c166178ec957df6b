"""The compiled scheduler: Slurm's nodes with the node groups' GPUs, partitions with their nodes,
one switch per rack, and the slurm role's variables made from them."""

from __future__ import annotations

from pathlib import Path

import pytest
from blueprint_helpers import BARE_METAL, SLURM_MIXED

from rackform.blueprint.loader import load_effective
from rackform.blueprint.problems import BlueprintError
from rackform.blueprint.targets.aws.names import node_name
from rackform.engine import compile_effective
from rackform.plan.scheduler import gres_type
from rackform.plan.slurm import ControllerInstance, Switch

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_compiles_to_racks_partitions_and_gpus():
    plan = compile_effective(load_effective(ROOT / "blueprints" / "baremetal-slurm.yaml"))
    s = plan.scheduler
    assert s.controller == "hgx-01"
    assert {(n.name, n.gpus, n.gpu_type) for n in s.nodes} == {
        (f"hgx-0{i}", 8, "h100_sxm") for i in range(1, 5)
    }
    assert s.switches == (
        Switch("rack-r1", ("hgx-01", "hgx-02")),
        Switch("rack-r2", ("hgx-03", "hgx-04")),
        Switch("root", switches=("rack-r1", "rack-r2")),
    )
    assert [(p.name, p.default, p.preemptible) for p in s.partitions] == [
        ("batch", True, False),
        ("scavenger", False, True),
    ]
    assert (s.preempt_mode, s.grace_s, s.checkpoint_dir) == ("requeue", 120, "/mnt/checkpoints")
    v = plan.group_vars
    assert v["slurm_enabled"] is True and v["slurm_interface"] == "ib0"
    assert v["slurm_partitions"][0]["max_time_min"] == 4320
    assert v["slurm_partitions"][1]["max_time_min"] == 0  # unlimited
    # The smoke job: one Slurm job from the controller, every node's eight H100s as GRES.
    assert {k: x for k, x in v.items() if k.startswith("smoke_train_slurm")} == {
        "smoke_train_slurm": True,
        "smoke_train_slurm_submit_host": "hgx-01",
        "smoke_train_slurm_gres": "gpu:h100_sxm:8",
    }


def test_a_cpu_group_has_no_gpus_and_unracked_hosts_share_one_switch(write):
    plan = compile_effective(load_effective(write(SLURM_MIXED)))
    s = plan.scheduler
    assert {n.name: (n.gpus, n.gpu_type) for n in s.nodes} == {
        "n1": (8, "h100_sxm"),
        "n2": (8, "h100_sxm"),
        "c1": (0, None),
    }
    assert {p.name: p.nodes for p in s.partitions} == {
        "gpu": ("n1", "n2"),
        "spare": ("n1", "n2", "c1"),
    }
    assert s.switches == (Switch("cluster", ("n1", "n2", "c1")),)  # no racks: no root either
    assert plan.group_vars["slurm_nodes"][2] == {"name": "c1", "gpus": 0, "gpu_type": ""}
    # One job cannot ask a CPU host and the GPU hosts for the same GRES: no smoke job through Slurm.
    assert plan.group_vars["smoke_train_slurm"] is False


def test_without_a_scheduler_the_role_is_off_and_gets_nothing_else(write):
    plan = compile_effective(load_effective(write(BARE_METAL)))
    assert plan.scheduler is None
    assert {k: v for k, v in plan.group_vars.items() if k.startswith("slurm")} == {
        "slurm_enabled": False
    }
    assert not any(k.startswith("smoke_train_slurm") for k in plan.group_vars)


def test_gres_types_are_slurm_names():
    assert gres_type("H100-SXM") == "h100_sxm"
    assert gres_type("A100-SXM-80GB") == "a100_sxm_80gb"


# An AWS training cluster with hyphens in every name Slurm's node names are made of: the
# blueprint (llm-train-a), the environment's stack (llm-train-a-dev) and the node groups.
AWS_SLURM = """
name: llm-train-a
purpose: training
owner: team@example.com
target:
  type: aws
  region: us-east-1
  availability_zone: us-east-1a
  market: MARKET
  ami: {image: ubuntu-24.04}
node_groups:
  - {name: gpu-a, instance_type: p5.48xlarge, count: 2}
  - {name: gpu-a-1, instance_type: p5.48xlarge, count: 1}
network: {fabric: efa}
workload: {model_params_b: 7, method: full, checkpoint_interval_min: 30}
scheduler:
  type: slurm
  partitions:
    - {name: batch, node_groups: [gpu-a], default: true, priority_tier: 5}
    - {name: spare, node_groups: [gpu-a, gpu-a-1], priority_tier: 1, preemptible: true}
environments:
  dev: {}
"""


def aws_plan(write, market: str = "on-demand", extra: str = ""):
    text = AWS_SLURM.replace("MARKET", market).replace("  type: slurm\n", "  type: slurm\n" + extra)
    return compile_effective(load_effective(write(text), "dev"))


def test_aws_nodes_are_named_as_the_stack_names_its_instances(write):
    plan = aws_plan(write)
    s = plan.scheduler
    assert plan.stack == "llm-train-a-dev"
    # `{stack}-{group}-{i}`: group gpu-a's second node and group gpu-a-1's first differ.
    assert [n.name for n in s.nodes] == [
        "llm-train-a-dev-gpu-a-0",
        "llm-train-a-dev-gpu-a-1",
        "llm-train-a-dev-gpu-a-1-0",
    ]
    assert [n.name for n in s.nodes] == [
        node_name(plan.stack, g.name, i) for g in plan.node_groups for i in range(g.count)
    ]
    assert {p.name: p.nodes for p in s.partitions} == {
        "batch": ("llm-train-a-dev-gpu-a-0", "llm-train-a-dev-gpu-a-1"),
        "spare": (
            "llm-train-a-dev-gpu-a-0",
            "llm-train-a-dev-gpu-a-1",
            "llm-train-a-dev-gpu-a-1-0",
        ),
    }
    # One cluster placement group: one leaf switch, no root.
    assert s.switches == (Switch("cluster", tuple(n.name for n in s.nodes)),)


def test_the_aws_controller_is_an_instance_of_its_own_and_no_node(write):
    plan = aws_plan(write)
    s = plan.scheduler
    assert s.controller == "llm-train-a-dev-slurmctld"
    assert s.controller_is_node is False
    assert s.instance == ControllerInstance("llm-train-a-dev-slurmctld", "m7i.large")
    assert s.controller not in [n.name for n in s.nodes]
    assert all(s.controller not in p.nodes for p in s.partitions)
    assert all(s.controller not in w.nodes for w in s.switches)
    v = plan.group_vars
    assert (v["slurm_controller"], v["slurm_controller_is_node"]) == (s.controller, False)
    assert s.controller not in [n["name"] for n in v["slurm_nodes"]]
    # The smoke job is submitted on the controller, which the inventory holds (not a GPU node).
    assert v["smoke_train_slurm_submit_host"] == s.controller
    typed = aws_plan(write, extra="  controller_instance_type: c7i.xlarge\n").scheduler
    assert typed.instance == ControllerInstance("llm-train-a-dev-slurmctld", "c7i.xlarge")


def test_the_spot_agent_runs_on_aws_spot_capacity_only(write):
    assert aws_plan(write, "spot").group_vars["slurm_spot_agent"] is True
    assert aws_plan(write, "on-demand").group_vars["slurm_spot_agent"] is False
    bare = compile_effective(load_effective(ROOT / "blueprints" / "baremetal-slurm.yaml"))
    assert "slurm_spot_agent" not in bare.group_vars  # the role's default: off
    assert bare.group_vars["slurm_controller_is_node"] is True
    assert bare.scheduler.controller_is_node and bare.scheduler.instance is None


def test_fairness_gpu_limits_on_aws_are_not_held_against_hosts_it_has_none_of(write):
    """AWS groups list no hosts (their nodes are `count` instances): a GPU limit is not "more
    than the cluster's 0 GPUs"."""
    extra = (
        "  fairness:\n"
        "    qos: [{name: urgent, max_gpus_per_user: 16}]\n"
        "    accounts: [{name: llm-pretrain, max_gpus: 24}]\n"
    )
    f = aws_plan(write, extra=extra).scheduler.fairness
    assert [(a.name, a.max_gpus) for a in f.accounts] == [("llm-pretrain", 24)]
    assert [(q.name, q.max_gpus_per_user) for q in f.qos] == [("urgent", 16)]


def test_fairness_mistakes_on_aws_are_located_as_on_bare_metal(write):
    extra = (
        "  fairness:\n"
        "    qos: [{name: urgent}, {name: urgent}]\n"
        "    accounts: [{name: llm-pretrain, qos: [urgnet]}]\n"
    )
    with pytest.raises(BlueprintError) as exc:
        aws_plan(write, extra=extra)
    found = {p.path: p.message for p in exc.value.problems}
    assert found["scheduler.fairness.qos[1].name"] == "QOS 'urgent' is declared twice"
    assert "urgnet" in found["scheduler.fairness.accounts[0].qos[0]"]
