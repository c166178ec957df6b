"""Slurm's tree from EC2's DescribeInstanceTopology. moto (5.x) serves no such call, so the
answers are recorded in the documented shape (API reference, DescribeInstanceTopology:
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceTopology.html) and
given to a real boto3 client through botocore's Stubber, which checks every request and response
against botocore's own EC2 model: only AWS's side is stood in for."""

from __future__ import annotations

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from rackform.blueprint.schema.names import UnsafeValue
from rackform.targets.aws.topology import (
    ROOT,
    UNPLACED,
    Placed,
    read,
    read_topology,
    slurm_topology,
)

OP = "describe_instance_topology"
TREE_HEAD = (
    "# The fabric's switches as EC2 DescribeInstanceTopology gives them"
    " (leaves with their nodes, the layers above).\n"
)


def ec2():
    return boto3.client(
        "ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )


def answer(iid, nodes, block=None, itype="p5.48xlarge"):
    """One instance as EC2 documents it (the example in the user guide's "Examples": three
    network nodes, top first; UltraServer types add the capacity block)."""
    out = {
        "InstanceId": iid,
        "InstanceType": itype,
        "GroupName": "t-train-default-pg",
        "NetworkNodes": list(nodes),
        "AvailabilityZone": "us-east-1a",
        "ZoneId": "use1-az1",
    }
    if block:
        out["CapacityBlockId"] = block
    return out


NODES = {f"t-train-default-gpu-{i}": f"i-0{i:016x}" for i in range(4)}


def test_pages_are_followed_and_a_missing_instance_is_unplaced():
    client = ec2()
    ids = list(NODES.values())
    with Stubber(client) as stub:
        stub.add_response(
            OP,
            {
                "Instances": [answer(ids[0], ["nn-aaaa1111", "nn-bbbb1111", "nn-cccc1111"])],
                "NextToken": "page-2",
            },
            {"InstanceIds": ids},
        )
        stub.add_response(
            OP,
            {
                "Instances": [
                    answer(ids[1], ["nn-aaaa1111", "nn-bbbb1111", "nn-cccc2222"]),
                    answer(ids[2], ["nn-aaaa1111", "nn-bbbb1111", "nn-cccc2222"]),
                    # One we did not ask about (another stack's): ignored.
                    answer("i-0fffffffffffffff0", ["nn-x1", "nn-x2", "nn-x3"]),
                ]
            },
            {"InstanceIds": ids, "NextToken": "page-2"},
        )
        placed = read(client, NODES)
        stub.assert_no_pending_responses()
    names = list(NODES)
    assert placed[0] == Placed(names[0], ("nn-aaaa1111", "nn-bbbb1111", "nn-cccc1111"))
    assert placed[3] == Placed(names[3], ())  # EC2 said nothing of it
    topo = slurm_topology(placed)
    sw = {s["name"]: s for s in topo["slurm_switches"]}
    assert sw["nn-cccc1111"]["nodes"] == [names[0]]
    assert sw["nn-cccc2222"]["nodes"] == [names[1], names[2]]
    assert sw["nn-bbbb1111"]["switches"] == ["nn-cccc1111", "nn-cccc2222"]
    assert sw["nn-aaaa1111"]["switches"] == ["nn-bbbb1111"]
    assert sw[UNPLACED]["nodes"] == [names[3]]
    # Two tops (the network's and the unplaced leaf) meet under one root, named last.
    assert topo["slurm_switches"][-1] == {
        "name": ROOT,
        "nodes": [],
        "switches": ["nn-aaaa1111", UNPLACED],
    }
    # Every switch is named before the switch above it (children first).
    order = [s["name"] for s in topo["slurm_switches"]]
    for s in topo["slurm_switches"]:
        for child in s["switches"]:
            assert order.index(child) < order.index(s["name"])
    assert topo["slurm_blocks"] == []


def test_more_than_100_instances_are_asked_100_at_a_time():
    client = ec2()
    many = {f"n-{i}": f"i-{i:017x}" for i in range(150)}
    ids = list(many.values())
    with Stubber(client) as stub:
        stub.add_response(OP, {"Instances": []}, {"InstanceIds": ids[:100]})
        stub.add_response(
            OP,
            {"Instances": [answer(ids[120], ["nn-1", "nn-2", "nn-3"])]},
            {"InstanceIds": ids[100:]},
        )
        placed = read(client, many)
        stub.assert_no_pending_responses()
    assert placed[120].network_nodes == ("nn-1", "nn-2", "nn-3")
    assert sum(1 for p in placed if p.network_nodes) == 1


def test_three_and_four_layers_mix_and_ultraserver_blocks():
    """A P6e-style UltraServer answers four layers and its capacity block; beside it a P5 with
    three under the same third layer: the third layer's own node goes to a leaf of its own,
    since a topology.conf switch lists nodes or switches, not both."""
    placed = [
        Placed("us-0", ("nn-a", "nn-b", "nn-c", "nn-d1"), "cr-0123456789abcdef0"),
        Placed("us-1", ("nn-a", "nn-b", "nn-c", "nn-d1"), "cr-0123456789abcdef0"),
        Placed("us-2", ("nn-a", "nn-b", "nn-c", "nn-d2"), "cr-0fedcba9876543210"),
        Placed("p5-0", ("nn-a", "nn-b", "nn-c")),
    ]
    topo = slurm_topology(placed)
    sw = {s["name"]: s for s in topo["slurm_switches"]}
    assert sw["nn-d1"]["nodes"] == ["us-0", "us-1"]
    assert sw["nn-c"] == {
        "name": "nn-c",
        "nodes": [],
        "switches": ["nn-d1", "nn-d2", "nn-c-direct"],
    }
    assert sw["nn-c-direct"]["nodes"] == ["p5-0"]
    assert ROOT not in sw  # one top: no root of ours
    for s in topo["slurm_switches"]:
        assert not (s["nodes"] and s["switches"]), s
    assert topo["slurm_blocks"] == [
        {"name": "cr-0123456789abcdef0", "nodes": ["us-0", "us-1"]},
        {"name": "cr-0fedcba9876543210", "nodes": ["us-2"]},
    ]


def test_p5_instances_get_the_tree_written_by_the_one_renderer():
    """No UltraServer block: topology/tree, its text what `topology_conf` writes for the
    switches EC2 gave (the same function writes the plan's)."""
    placed = [
        Placed("p5-0", ("nn-a", "nn-b", "nn-c1")),
        Placed("p5-1", ("nn-a", "nn-b", "nn-c1")),
        Placed("p5-2", ("nn-a", "nn-b", "nn-c2")),
    ]
    topo = slurm_topology(placed)
    assert topo["slurm_topology_plugin"] == "topology/tree"
    assert topo["slurm_topology_conf"] == TREE_HEAD + (
        "SwitchName=nn-c1 Nodes=p5-0,p5-1\n"
        "SwitchName=nn-c2 Nodes=p5-2\n"
        "SwitchName=nn-b Switches=nn-c1,nn-c2\n"
        "SwitchName=nn-a Switches=nn-b\n"
    )
    # A capacity block of one instance joins no nodes: still the tree.
    single = [Placed("p6-0", ("nn-a", "nn-b", "nn-c"), "cr-0123456789abcdef0")]
    assert slurm_topology(single)["slurm_topology_plugin"] == "topology/tree"


def test_ultraserver_blocks_win_over_the_tree_as_the_plans_rule_says():
    """Two P6e-GB200 UltraServers' capacity blocks (their NVLink domains) and a P5 beside
    them: topology/block, one block per capacity block, the P5 a block of its own (under
    block every node is in one), BlockSizes from the smallest; no switch lines (one plugin)."""
    us = [f"gb-{i}" for i in range(4)]
    placed = [
        *(Placed(n, ("nn-a", "nn-b", "nn-c", "nn-d1"), "cr-0123456789abcdef0") for n in us[:2]),
        *(Placed(n, ("nn-a", "nn-b", "nn-c", "nn-d2"), "cr-0fedcba9876543210") for n in us[2:]),
        Placed("p5-0", ("nn-a", "nn-b", "nn-c")),
    ]
    topo = slurm_topology(placed)
    assert topo["slurm_topology_plugin"] == "topology/block"
    text = topo["slurm_topology_conf"]
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "BlockName=cr-0123456789abcdef0 Nodes=gb-0,gb-1",
        "BlockName=cr-0fedcba9876543210 Nodes=gb-2,gb-3",
        "BlockName=p5-0 Nodes=p5-0",
        "BlockSizes=1,2",
    ]
    assert "SwitchName" not in text
    # The tree is still given (the role's preflight checks its nodes), and the blocks.
    assert topo["slurm_switches"] and len(topo["slurm_blocks"]) == 2
    # Slurm 25.05+: both at once, from the same placement: the capacity blocks the default,
    # EC2's network nodes the tree.
    both = yaml.safe_load(topo["slurm_topology_yaml"])
    assert [t["topology"] for t in both] == ["nvlink", "fabric"] and both[0]["cluster_default"]
    assert [b["block"] for b in both[0]["block"]["blocks"]][:2] == [
        "cr-0123456789abcdef0",
        "cr-0fedcba9876543210",
    ]
    assert [w["switch"] for w in both[1]["tree"]["switches"]] == [
        w["name"] for w in topo["slurm_switches"]
    ]


def test_the_aws_text_is_the_plans_renderer_for_the_same_shape():
    """One writer: the text for EC2's answer is `topology_conf` of the same topology."""
    from rackform.plan.slurm import Switch
    from rackform.plan.slurm_topology import topology_conf
    from rackform.targets.aws.topology import topology_plan

    placed = [Placed(f"n-{i}", ("x1", "x2", "x3"), "cr-1") for i in range(3)]
    topo = slurm_topology(placed)
    plan = topology_plan(
        [Switch("x3", ("n-0", "n-1", "n-2")), Switch("x2", switches=("x3",)),
         Switch("x1", switches=("x2",))],
        {"cr-1": ["n-0", "n-1", "n-2"]},
        ["n-0", "n-1", "n-2"],
    )  # fmt: skip
    conf = topology_conf(plan)
    assert (conf.plugin, conf.text) == (topo["slurm_topology_plugin"], topo["slurm_topology_conf"])
    assert "BlockName=cr-1 Nodes=n-0,n-1,n-2\nBlockSizes=3\n" in conf.text


@pytest.mark.parametrize(
    "bad", ["nn-a b", "nn-a,nn-b", "Switches=x", "nn-a\nSwitchName=evil", "", "-nn"]
)
def test_a_network_node_that_cannot_name_a_switch_is_refused(bad):
    client = ec2()
    iid = "i-0123456789abcdef0"
    with Stubber(client) as stub:
        stub.add_response(OP, {"Instances": [answer(iid, ["nn-a", bad, "nn-c"])]})
        with pytest.raises(UnsafeValue, match="cannot name a switch"):
            read(client, {"n-0": iid})


def test_an_instance_id_from_the_stack_is_checked_before_it_is_sent():
    with pytest.raises(UnsafeValue):
        read(ec2(), {"n-0": "i-0123;reboot"})


def test_read_topology_asks_the_region_given():
    asked = []

    def client(service, region):
        asked.append((service, region))
        c = ec2()
        stub = Stubber(c)
        stub.add_response(OP, {"Instances": [answer("i-00000000000000001", ["x1", "x2", "x3"])]})
        stub.activate()
        return c

    topo = read_topology("eu-west-1", {"n-0": "i-00000000000000001"}, client)
    assert asked == [("ec2", "eu-west-1")]
    assert topo["slurm_switches"][0] == {"name": "x3", "nodes": ["n-0"], "switches": []}


# The stack's part, under Pulumi's mock runtime (the engine and AWS are not reachable here).


def test_a_slurm_cluster_reads_its_tree_after_the_instances_exist(tmp_path):
    from planhelp import AWS_SLURM, of_type, one, plan

    from rackform.stack.offline import KNOWN_AFTER_UP

    recs = plan(tmp_path, AWS_SLURM, env="dev")
    topo = one(recs, "rackform:InstanceTopology")
    assert topo.name == "llm-train-a-dev-topology"
    # Each node's name with its instance id: known only once the instances exist.
    assert topo.inputs == {"region": "us-east-1", "nodes": KNOWN_AFTER_UP}
    nodes = [r for r in of_type(recs, "ec2/instance:Instance") if not r.name.endswith("slurmctld")]
    assert len(nodes) == 3
    assert topo.dependency_urns == {n.urn for n in nodes}  # it waits for every node instance
    # Configure writes topology.conf from the tree the stack read, not the plan's one leaf; the
    # offline plan names where it comes from, and every other variable stays as it was.
    got = one(recs, "rackform:Configure").inputs["group_vars"]
    assert got["slurm_switches"] == "<llm-train-a-dev-topology>.slurm_switches"
    assert got["slurm_topology_conf"] == "<llm-train-a-dev-topology>.slurm_topology_conf"
    assert got["slurm_topology_plugin"] == "<llm-train-a-dev-topology>.slurm_topology_plugin"
    assert got["slurm_spot_agent"] is True


def test_no_scheduler_no_topology_read(tmp_path):
    from planhelp import AWS_TRAINING, of_type, plan

    assert not of_type(plan(tmp_path, AWS_TRAINING), "rackform:InstanceTopology")


def test_the_provider_reads_on_create_update_and_refresh_and_never_replaces(monkeypatch):
    from rackform.targets.aws import api
    from rackform.targets.aws.topology import InstanceTopologyProvider

    calls = []

    def client(service, region):
        calls.append(region)
        c = ec2()
        stub = Stubber(c)
        stub.add_response(OP, {"Instances": [answer("i-00000000000000001", ["a", "b", "c"])]})
        stub.activate()
        return c

    monkeypatch.setattr(api, "boto3_client", client)
    p = InstanceTopologyProvider()
    props = {"region": "us-east-1", "nodes": {"n-0": "i-00000000000000001"}}
    made = p.create(props)
    assert made.outs["slurm_switches"][0] == {"name": "c", "nodes": ["n-0"], "switches": []}
    assert p.diff("t", made.outs, {**props, "slurm_switches": None}).changes is False
    moved = {"region": "us-east-1", "nodes": {"n-0": "i-00000000000000001", "n-1": "i-2"}}
    change = p.diff("t", made.outs, moved)
    assert change.changes is True and change.replaces == []
    assert p.read("t", props).outs["slurm_switches"] == made.outs["slurm_switches"]
    assert calls == ["us-east-1", "us-east-1"]
    # A state from before topology.conf was computed here is read again (an update, in place).
    earlier = {k: v for k, v in made.outs.items() if not k.startswith("slurm_topology_")}
    change = p.diff("t", earlier, props)
    assert change.changes is True and change.replaces == []
    assert p.update("t", earlier, props).outs["slurm_topology_plugin"] == "topology/tree"


def test_an_aws_error_is_one_line_naming_the_permission(monkeypatch):
    from rackform.targets.aws import api
    from rackform.targets.aws.topology import InstanceTopologyProvider

    def client(service, region):
        c = ec2()
        stub = Stubber(c)
        stub.add_client_error(OP, "UnauthorizedOperation", "not allowed")
        stub.activate()
        return c

    monkeypatch.setattr(api, "boto3_client", client)
    with pytest.raises(RuntimeError, match="ec2:DescribeInstanceTopology") as err:
        InstanceTopologyProvider().create({"region": "us-east-1", "nodes": {"n": "i-1"}})
    assert "UnauthorizedOperation" in str(err.value)


def test_drift_compares_the_hosts_with_the_tree_ec2_gives_now(tmp_path, monkeypatch):
    """`drift --hosts` takes Slurm's tree from EC2 (as `up` did), not the plan's one leaf."""
    from planhelp import AWS_SLURM, AWS_TRAINING, write_blueprint

    from rackform.blueprint.loader import load_effective
    from rackform.engine import compile_effective
    from rackform.plan.inventory import with_nodes
    from rackform.targets.aws import api
    from rackform.targets.aws.runtime import RUNTIME

    asked = []

    def client(service, region):
        c = ec2()
        stub = Stubber(c)
        stub.add_response(
            OP,
            {"Instances": [answer("i-00000000000000001", ["t1", "t2", "t3"])]},
            {"InstanceIds": ["i-00000000000000001", "i-00000000000000002"]},
        )
        stub.activate()
        asked.append(region)
        return c

    monkeypatch.setattr(api, "boto3_client", client)
    plan = compile_effective(load_effective(write_blueprint(tmp_path, AWS_SLURM), "dev"))
    nodes = {
        "gpu-a": [
            ["llm-train-a-dev-gpu-a-0", "10.0.0.5", 22, "i-00000000000000001"],
            ["llm-train-a-dev-gpu-a-1", "10.0.0.6", 22, "i-00000000000000002"],
        ],
        "gpu-a-1": [],
    }
    got = RUNTIME.observed_vars(plan, with_nodes(plan, nodes))
    assert asked == ["us-east-1"]
    assert got == {
        "slurm_switches": [
            {"name": "t3", "nodes": ["llm-train-a-dev-gpu-a-0"], "switches": []},
            {"name": "t2", "nodes": [], "switches": ["t3"]},
            {"name": "t1", "nodes": [], "switches": ["t2"]},
            {"name": UNPLACED, "nodes": ["llm-train-a-dev-gpu-a-1"], "switches": []},
            {"name": ROOT, "nodes": [], "switches": ["t1", UNPLACED]},
        ],
        "slurm_topology_plugin": "topology/tree",
        "slurm_topology_conf": TREE_HEAD + "SwitchName=t3 Nodes=llm-train-a-dev-gpu-a-0\n"
        "SwitchName=t2 Switches=t3\n"
        "SwitchName=t1 Switches=t2\n"
        "SwitchName=aws-unplaced Nodes=llm-train-a-dev-gpu-a-1\n"
        "SwitchName=aws-root Switches=t1,aws-unplaced\n",
        # No capacity block spans nodes: no topology.yaml (the role removes a stale one).
        "slurm_topology_yaml": "",
    }
    plain = compile_effective(load_effective(write_blueprint(tmp_path, AWS_TRAINING)))
    assert RUNTIME.observed_vars(plain, with_nodes(plain, {})) == {}  # no Slurm: nothing read
