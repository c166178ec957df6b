"""Slurm on an AWS training cluster under Pulumi's mock runtime (the engine and AWS cannot be
reached from here): the stack's controller instance (where it sits, how it is reached, what it
is not), the names the plan gave Slurm's nodes against the instances the program creates, the
inventory the Configure stage gets, and which edits replace what."""

from __future__ import annotations

from typing import ClassVar

import pytest
from planhelp import AWS_SLURM, AWS_TRAINING, of_type, one, plan, variant, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.gitops.diff import compare_resources
from rackform.plan.inventory import SLURM_CONTROLLER_GROUP, inventory_hosts
from rackform.stack import offline
from rackform.stack.replacement import steps

INSTANCE = "aws:ec2/instance:Instance"
CONTROLLER = "llm-train-a-dev-slurmctld"


def records(tmp_path, doc=AWS_SLURM):
    return plan(tmp_path, doc, env="dev")


def controller(recs):
    (found,) = [r for r in of_type(recs, "ec2/instance:Instance") if r.name == CONTROLLER]
    return found


def test_the_controller_instance_sits_with_the_nodes_private_and_small(tmp_path):
    recs = records(tmp_path)
    c = controller(recs)
    nodes_subnet = next(r for r in of_type(recs, "ec2/subnet:Subnet") if r.name.endswith("-nodes"))
    lt = of_type(recs, "launchTemplate:LaunchTemplate")[0]
    i = c.inputs
    assert i["instanceType"] == "m7i.large"
    assert i["subnetId"] == f"<{nodes_subnet.name}>.id"  # the nodes' private subnet
    assert i["associatePublicIpAddress"] is False
    # The nodes' group, which admits every protocol between its members (Slurm's 6817, 6818
    # and srun's ephemeral ports among them).
    assert i["vpcSecurityGroupIds"] == lt.inputs["networkInterfaces"][0]["securityGroups"]
    assert i["vpcSecurityGroupIds"] == ["<llm-train-a-dev-sg>.id"]
    assert i["metadataOptions"]["httpTokens"] == "required"  # IMDSv2
    assert i["rootBlockDevice"]["encrypted"] is True
    assert "launchTemplate" not in i and "placementGroup" not in i
    # Bought on demand whatever the nodes' market (the blueprint is spot).
    assert "instanceMarketOptions" not in i
    profile = one(recs, "iam/instanceProfile:InstanceProfile")
    assert i["iamInstanceProfile"] == f"<{profile.name}>.name"
    # Its own image, Canonical's Ubuntu 24.04, pinned like the nodes' (here a DLAMI).
    doc = variant(AWS_SLURM, **{"target.ami": {"image": "dlami-ubuntu-24.04"}})
    recs = records(tmp_path, doc)
    pins = sorted(r.inputs["image"] for r in of_type(recs, "rackform:ImagePin"))
    assert pins == ["dlami-ubuntu-24.04", "ubuntu-24.04"]
    ami = controller(recs).inputs["ami"]
    assert "ubuntu-noble-24.04-amd64-server-*" in ami and "099720109477" in ami
    assert all(
        "Deep Learning" in t.inputs["imageId"]
        for t in of_type(recs, "launchTemplate:LaunchTemplate")
    )


def test_the_controller_is_tagged_like_the_cluster_and_says_what_it_is(tmp_path):
    recs = records(tmp_path)
    i = controller(recs).inputs
    node = next(r for r in of_type(recs, "ec2/instance:Instance") if r.name != CONTROLLER)
    cluster_tags = {k: v for k, v in node.inputs["tags"].items() if k != "Name"}
    assert cluster_tags.items() <= i["tags"].items()
    assert i["tags"]["Name"] == CONTROLLER
    assert i["tags"]["rackform:slurm"] == "controller"
    assert i["rootBlockDevice"]["tags"] == i["tags"]


def test_the_controller_gets_the_nodes_ssh_keys_through_the_same_user_data(tmp_path):
    # Under the mocks the keys are unknown until `up`, so both user data are: what is checked
    # is that both come from the stack's NodeKeys and nothing else.
    recs = records(tmp_path)
    keys = one(recs, "rackform:NodeKeys")
    c = controller(recs)
    assert keys.name in c.dependencies
    lt = of_type(recs, "launchTemplate:LaunchTemplate")[0]
    assert c.inputs["userData"] == lt.inputs["userData"] == offline.KNOWN_AFTER_UP
    assert keys.name in of_type(recs, "launchTemplate:LaunchTemplate")[0].dependencies


def test_the_stacks_instances_carry_the_names_the_plan_gave_slurm(tmp_path):
    recs = records(tmp_path)
    p = compile_effective(load_effective(write_blueprint(tmp_path, AWS_SLURM), "dev"))
    made = sorted(r.name for r in of_type(recs, "ec2/instance:Instance"))
    assert made == sorted([n.name for n in p.scheduler.nodes] + [p.scheduler.controller])
    # The controller is one instance, and no Slurm node.
    assert p.scheduler.controller == CONTROLLER
    assert CONTROLLER not in [n.name for n in p.scheduler.nodes]


def test_without_a_scheduler_there_is_no_controller_instance(tmp_path):
    doc = {k: v for k, v in AWS_SLURM.items() if k != "scheduler"}
    recs = records(tmp_path, doc)
    assert not any(r.name.endswith("slurmctld") for r in recs)
    assert len(of_type(recs, "ec2/instance:Instance")) == 3


class AddressedMocks(offline.RecordingMocks):
    """The engine's answer after `up`, which the offline mocks leave unknown: each instance's
    private address, and an id as EC2 gives one (a mock for the AWS API this machine cannot
    reach; the inventory refuses an id that is none, as it goes into the tunnel's command)."""

    addresses: ClassVar[dict[str, str]] = {}

    def __init__(self):
        super().__init__()
        self.unknown = {}

    def new_resource(self, args):
        rid, state = super().new_resource(args)
        if args.typ == INSTANCE:
            state["privateIp"] = self.addresses.setdefault(
                args.name, f"10.0.0.{len(self.addresses) + 10}"
            )
            rid = instance_id(args.name)
        return rid, state


def instance_id(name: str) -> str:
    return f"i-{int(AddressedMocks.addresses[name].rsplit('.', 1)[1]):017x}"


def test_configure_gets_the_controller_in_its_own_group_never_in_gpu_nodes(tmp_path, monkeypatch):
    monkeypatch.setattr(offline, "RecordingMocks", AddressedMocks)
    AddressedMocks.addresses = {}
    recs = records(tmp_path)
    inv = one(recs, "rackform:Configure").inputs["inventory"]
    children = inv["all"]["children"]
    ctl = children[SLURM_CONTROLLER_GROUP]["hosts"]
    assert list(ctl) == [CONTROLLER]
    assert ctl[CONTROLLER] == {
        "ansible_host": AddressedMocks.addresses[CONTROLLER],
        "ansible_port": 22,
        "rackform_instance_id": instance_id(CONTROLLER),  # what the SSH tunnel names
    }
    gpu = children["gpu_nodes"]["children"]
    assert set(gpu) == {"ng_gpu_a", "ng_gpu_a_1"}
    assert inventory_hosts(inv) == [
        "llm-train-a-dev-gpu-a-0",
        "llm-train-a-dev-gpu-a-1",
        "llm-train-a-dev-gpu-a-1-0",
    ]
    assert all(CONTROLLER not in g["hosts"] for g in gpu.values())
    # What Configure must find is the nodes, not the controller.
    assert one(recs, "rackform:Configure").inputs["expected_nodes"] == {"min": 3, "max": 3}
    # The tunnel command names each host's instance id: the controller's is its own.
    assert "{{ rackform_instance_id }}" in inv["all"]["vars"]["rackform_ssh_proxy"]


def compare(tmp_path, doc, **change):
    def res(recs):
        return {
            r.urn: {"type": r.type, "custom": r.custom, "inputs": r.inputs, "options": r.options}
            for r in recs
        }

    before = res(records(tmp_path, doc))
    after = res(records(tmp_path, variant(doc, **change)))
    return {u.rsplit("::", 1)[1]: s for u, s in steps(before, after).items()}


def changed(found, name):
    """The properties an update changes, less the blueprint digest every tagged resource carries."""
    return [
        p["property"] for p in found[name].get("properties", []) if "digest" not in p["property"]
    ]


def test_a_bigger_controller_resizes_it_in_place_and_leaves_the_gpu_nodes_alone(tmp_path):
    found = compare(tmp_path, AWS_SLURM, **{"scheduler.controller_instance_type": "c7i.xlarge"})
    assert found[CONTROLLER]["op"] == "update"
    assert changed(found, CONTROLLER) == ["instanceType"]
    assert not [n for n, s in found.items() if s["op"] in ("replace", "create", "delete")]
    nodes = [n for n in found if n.startswith("llm-train-a-dev-gpu-a") and n[-1].isdigit()]
    assert nodes and all(changed(found, n) == [] for n in nodes)  # the digest tag only


def test_a_new_node_adds_an_instance_and_leaves_the_controller_alone(tmp_path):
    found = compare(
        tmp_path, AWS_SLURM, **{"node_groups.1": {**AWS_SLURM["node_groups"][1], "count": 2}}
    )
    assert found["llm-train-a-dev-gpu-a-1-1"]["op"] == "create"
    assert found[CONTROLLER]["op"] == "update" and changed(found, CONTROLLER) == []
    assert not [n for n, s in found.items() if s["op"] in ("replace", "delete")]


@pytest.mark.parametrize("market", ["on-demand", "spot"])
def test_the_spot_agent_follows_the_market(tmp_path, market):
    doc = variant(AWS_SLURM, **{"target.market": market})
    configure = one(records(tmp_path, doc), "rackform:Configure")
    assert configure.inputs["group_vars"]["slurm_spot_agent"] is (market == "spot")


def test_aws_training_without_slurm_is_unchanged(tmp_path):
    recs = plan(tmp_path, AWS_TRAINING)
    assert not any("slurm" in r.name for r in recs)


def test_a_new_zone_replaces_the_controller_too_and_diff_names_it(tmp_path):
    def res(recs):
        return {
            r.urn: {"type": r.type, "custom": r.custom, "inputs": r.inputs, "options": r.options}
            for r in recs
        }

    before = res(records(tmp_path))
    after = res(records(tmp_path, variant(AWS_SLURM, **{"target.availability_zone": "us-east-1b"})))
    found = {r["urn"].rsplit("::", 1)[1]: r for r in compare_resources(before, after)}
    assert found[CONTROLLER]["op"] == "replace"
    assert found[CONTROLLER]["reason"].startswith("subnetId: llm-train-a-dev-nodes replaced")
    assert found[CONTROLLER]["nodes"] == "replaces"
    assert found[CONTROLLER]["what"] == "Slurm's controller and its queue"
    node = found["llm-train-a-dev-gpu-a-0"]
    assert node["nodes"] == "replaces" and "what" not in node
