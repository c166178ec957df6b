"""The inventory with the hosts a stack created: Slurm's controller instance (AWS) is a host of
`slurm_controller`, reached like the nodes (its instance id for the tunnel), and never a node:
not in `gpu_nodes`, not counted by what reads the nodes (validation's expected hosts, the
runner's forks beside it)."""

from __future__ import annotations

import re

import pytest
from planhelp import AWS_SLURM, BARE_METAL, write_blueprint

from rackform.acceptance.cluster import merge_reports
from rackform.blueprint.loader import load_effective
from rackform.blueprint.schema.names import UnsafeValue
from rackform.engine import compile_effective
from rackform.plan.inventory import SLURM_CONTROLLER_GROUP, host_groups, inventory_hosts, with_nodes

CTL = "llm-train-a-dev-slurmctld"
NODES = {
    "gpu-a": [
        ["llm-train-a-dev-gpu-a-0", "10.0.0.11", 22, "i-0a"],
        ["llm-train-a-dev-gpu-a-1", "10.0.0.12", 22, "i-0b"],
    ],
    "gpu-a-1": [["llm-train-a-dev-gpu-a-1-0", "10.0.0.13", 22, "i-0c"]],
}


def aws_plan(tmp_path):
    return compile_effective(load_effective(write_blueprint(tmp_path, AWS_SLURM), "dev"))


def test_the_controller_is_the_one_host_of_its_group_with_its_tunnel_id(tmp_path):
    plan = aws_plan(tmp_path)
    inv = with_nodes(plan, NODES, [CTL, "10.0.0.5", 22, "i-0ctl"])
    children = inv["all"]["children"]
    assert children[SLURM_CONTROLLER_GROUP] == {
        "hosts": {
            CTL: {"ansible_host": "10.0.0.5", "ansible_port": 22, "rackform_instance_id": "i-0ctl"}
        }
    }
    gpu = children["gpu_nodes"]["children"]
    assert gpu["ng_gpu_a"]["hosts"]["llm-train-a-dev-gpu-a-1"]["rackform_instance_id"] == "i-0b"
    assert gpu["ng_gpu_a_1"]["hosts"]["llm-train-a-dev-gpu-a-1-0"]["ansible_host"] == "10.0.0.13"
    assert all(CTL not in g["hosts"] for g in gpu.values())
    # What reads the nodes reads these three, never the controller.
    assert inventory_hosts(inv) == [
        "llm-train-a-dev-gpu-a-0",
        "llm-train-a-dev-gpu-a-1",
        "llm-train-a-dev-gpu-a-1-0",
    ]
    # The role variables name the same controller host, and its tunnel is the nodes' one.
    assert plan.group_vars["slurm_controller"] == CTL
    assert "{{ rackform_instance_id }}" in inv["all"]["vars"]["rackform_ssh_proxy"]


def test_validation_expects_a_report_from_each_node_and_none_from_the_controller(tmp_path):
    inv = with_nodes(aws_plan(tmp_path), NODES, [CTL, "10.0.0.5", 22, "i-0ctl"])
    passed = {"checks": [{"name": "smoke", "status": "pass"}]}
    reports = {h: passed for h in inventory_hosts(inv)}
    merged = merge_reports(inventory_hosts(inv), reports, 0)
    (count,) = [c for c in merged["checks"] if c["name"] == "node_reports"]
    assert (count["status"], count["measured"], count["expected"]) == ("pass", 3, 3)


def test_before_up_and_without_a_controller_the_group_is_empty(tmp_path):
    # The plan's own inventory (no stack yet) and a stack without a controller instance.
    assert aws_plan(tmp_path).inventory["all"]["children"][SLURM_CONTROLLER_GROUP]["hosts"] == {}
    inv = with_nodes(aws_plan(tmp_path), NODES)
    assert inv["all"]["children"][SLURM_CONTROLLER_GROUP] == {"hosts": {}}
    bare = compile_effective(load_effective(write_blueprint(tmp_path, BARE_METAL, "bm.yaml")))
    assert bare.inventory["all"]["children"][SLURM_CONTROLLER_GROUP]["hosts"] == {}
    assert inventory_hosts(bare.inventory) == ["n1", "n2"]


def test_each_node_s_group_is_named_as_the_blueprint_names_it(tmp_path):
    """`gpu-a` and `gpu-a-1` are `ng_gpu_a` and `ng_gpu_a_1` in the inventory; the outlier check
    names the group as its owner wrote it."""
    plan = aws_plan(tmp_path)
    inv = with_nodes(plan, NODES, [CTL, "10.0.0.5", 22, "i-0ctl"])
    assert host_groups(inv, [g.name for g in plan.node_groups]) == {
        "llm-train-a-dev-gpu-a-0": "gpu-a",
        "llm-train-a-dev-gpu-a-1": "gpu-a",
        "llm-train-a-dev-gpu-a-1-0": "gpu-a-1",
    }


@pytest.mark.parametrize(
    "node,controller,said",
    [
        # Ansible puts ansible_host last on ssh's command line with no `--` before it.
        (["llm-train-a-dev-gpu-a-0", "-oProxyCommand=touch /tmp/x", 22, "i-0a"], None,
         "gives address '-oProxyCommand=touch /tmp/x', which is no IP address"),
        # The instance id goes into the tunnel's ProxyCommand, which a shell runs.
        (["llm-train-a-dev-gpu-a-0", "10.0.0.11", 22, "i-0a;touch /tmp/x"], None,
         "gives machine id 'i-0a;touch /tmp/x', which is no id"),
        (["-oProxyCommand=x", "10.0.0.11", 22, "i-0a"], None,
         "names a node '-oProxyCommand=x', which is no host name"),
        (["llm-train-a-dev-gpu-a-0", "10.0.0.11", "22 -oX", "i-0a"], None,
         "gives port '22 -oX', which is no port number"),
        (None, [CTL, "10.0.0.5", 22, "i-0ctl %h"], "gives machine id 'i-0ctl %h'"),
    ],
)  # fmt: skip
def test_a_node_a_stack_reports_is_checked_before_ansible_takes_it(
    tmp_path, node, controller, said
):
    nodes = {"gpu-a": [node or NODES["gpu-a"][0]]}
    with pytest.raises(UnsafeValue, match=re.escape(said)):
        with_nodes(aws_plan(tmp_path), nodes, controller)
