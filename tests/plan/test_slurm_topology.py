"""Slurm's topology.conf from the plan's topology (`rackform.plan.slurm_topology.topology_conf`)
and where a job is placed in it, for held-out-style sites: NVL72 racks (topology/block) and an
HGX B200 site on a rail-optimized leaf / spine fabric (topology/tree)."""

from __future__ import annotations

from pathlib import Path

import yaml
from topology_bp import hgx_rails, nvl72_site, plan_of

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.slurm_topology import (
    BLOCK,
    FABRIC,
    NVLINK,
    RACKS_HEADER,
    TREE,
    placement,
    topology_conf,
    topology_yaml,
)

ROOT = Path(__file__).resolve().parents[2]


def test_nvl72_racks_are_blocks_of_18_trays(tmp_path):
    plan = plan_of(tmp_path, nvl72_site(racks=3))
    conf = topology_conf(plan.topology)
    assert conf.plugin == BLOCK
    blocks = [line for line in conf.text.splitlines() if line.startswith("BlockName=")]
    # One block per rack (its NVLink domain), its 18 trays in the order listed.
    assert [b.split()[0] for b in blocks] == [
        "BlockName=nvl-r1",
        "BlockName=nvl-r2",
        "BlockName=nvl-r3",
    ]
    assert blocks[1] == "BlockName=nvl-r2 Nodes=" + ",".join(f"gb2-t{t:02d}" for t in range(1, 19))
    # Base 18 (every block has at least that many nodes), then 36: three blocks make no 72.
    assert conf.text.endswith("BlockSizes=18,36\n")
    assert not any(line.startswith("SwitchName=") for line in conf.text.splitlines())
    # The role gets the text and the plugin; the smoke job a segment of one domain each.
    v = plan.group_vars
    assert (v["slurm_topology_plugin"], v["slurm_topology_conf"]) == (BLOCK, conf.text)
    assert v["smoke_train_slurm_placement"] == ("--segment=18",)


def test_block_sizes_are_the_base_and_the_powers_of_two_the_blocks_make(tmp_path):
    plan = compile_effective(load_effective(ROOT / "blueprints" / "nvl72-slurm.yaml"))
    assert topology_conf(plan.topology).text.endswith("BlockSizes=18,36\n")  # two racks
    four = topology_conf(plan_of(tmp_path, nvl72_site(racks=4)).topology)
    assert four.text.endswith("BlockSizes=18,36,72\n")  # 4 x 18 trays: 18, 36 and 72 nodes


def test_declared_domains_replace_the_default_and_partial_ones_are_blocks_too(tmp_path):
    bp = nvl72_site(racks=1, trays=12)
    names = [h["name"] for h in bp["node_groups"][0]["hosts"]]
    bp["topology"] = {"nvlink_domains": [{"name": "half-a", "nodes": names[:6]}]}
    conf = topology_conf(plan_of(tmp_path, bp).topology)
    # The listed 6 trays, then the rest of the rack's trays as the next domain (6 more).
    assert conf.text.splitlines()[2:] == [
        "BlockName=half-a Nodes=" + ",".join(names[:6]),
        "BlockName=nvl-r1 Nodes=" + ",".join(names[6:]),
        "BlockSizes=6,12",
    ]


def test_hgx_rails_and_spine_are_a_tree(tmp_path):
    plan = plan_of(tmp_path, hgx_rails(units=2, per_unit=4))
    conf = topology_conf(plan.topology)
    assert conf.plugin == TREE
    assert conf.text.splitlines()[1:] == [
        "SwitchName=su1-rails Nodes=b200-11,b200-12,b200-13,b200-14",
        "SwitchName=su2-rails Nodes=b200-21,b200-22,b200-23,b200-24",
        "SwitchName=spine Switches=su1-rails,su2-rails",
    ]
    # Every node an NVLink domain of its own 8 GPUs: nothing spans nodes, so no block.
    assert {d.gpus for d in plan.topology.domains} == {8} and not plan.topology.spans_nodes
    assert plan.group_vars["slurm_topology_plugin"] == TREE
    # Eight nodes under two leaves: the smoke job cannot be on one switch, so no request.
    assert "smoke_train_slurm_placement" not in plan.group_vars
    assert placement(plan.topology, ["b200-21", "b200-23"]) == ("--switches=1",)
    assert placement(plan.topology, ["b200-14", "b200-21"]) == ()


def test_one_unit_puts_the_smoke_job_under_its_leaf(tmp_path):
    plan = plan_of(tmp_path, hgx_rails(units=1, per_unit=4))
    assert plan.group_vars["smoke_train_slurm_placement"] == ("--switches=1",)


def test_placement_in_blocks(tmp_path):
    t = plan_of(tmp_path, nvl72_site(racks=2)).topology
    r1 = [f"gb1-t{i:02d}" for i in range(1, 19)]
    r2 = [f"gb2-t{i:02d}" for i in range(1, 19)]
    assert placement(t, r1[:5]) == ("--segment=5",)  # one domain holds the whole job
    assert placement(t, r1[:9] + r2[:9]) == ("--segment=9",)  # as many in each domain
    assert placement(t, r1 + r2[:4]) == ()  # 18 and 4: no segment size fits both


def test_without_a_topology_the_racks_tree_is_what_the_role_always_wrote():
    """Blueprints that declare no topology get no new variable (the role's template writes its
    racks' leaves as before) and the function writes the same text (the role's own rendering
    of it is compared in tests/roles/test_slurm_config.py)."""
    plan = compile_effective(load_effective(ROOT / "blueprints" / "baremetal-slurm.yaml"))
    assert not plan.topology.declared
    assert "slurm_topology_conf" not in plan.group_vars
    assert "smoke_train_slurm_placement" not in plan.group_vars
    conf = topology_conf(plan.topology)
    assert (conf.plugin, conf.text) == (
        TREE,
        RACKS_HEADER
        + "SwitchName=rack-r1 Nodes=hgx-01,hgx-02\n"
        + "SwitchName=rack-r2 Nodes=hgx-03,hgx-04\n"
        + "SwitchName=root Switches=rack-r1,rack-r2\n",
    )


def _nvl72_on_ib(racks: int = 2, trays: int = 2) -> dict:
    """NVL72 racks on an InfiniBand fabric: leaf t holds tray t of every rack, a spine above."""
    leaves = [
        {"name": f"ib-l{t}", "nodes": [f"gb{r}-t{t:02d}" for r in range(1, racks + 1)]}
        for t in range(1, trays + 1)
    ]
    spine = {"name": "ib-spine", "switches": [leaf["name"] for leaf in leaves]}
    return nvl72_site(racks=racks, trays=trays, topology={"switches": [*leaves, spine]})


def test_where_both_matter_topology_yaml_holds_the_blocks_and_the_tree(tmp_path):
    plan = plan_of(tmp_path, _nvl72_on_ib())
    doc = yaml.safe_load(topology_yaml(plan.topology))
    # topology.yaml(5): each topology named first, one cluster_default; blocks and a tree.
    assert [list(t)[:2] for t in doc] == [["topology", "cluster_default"]] * 2
    block, tree = doc
    assert (block["topology"], block["cluster_default"]) == (NVLINK, True)
    assert (tree["topology"], tree["cluster_default"]) == (FABRIC, False)
    assert block["block"] == {
        "block_sizes": [2, 4],
        "blocks": [
            {"block": "nvl-r1", "nodes": "gb1-t01,gb1-t02"},
            {"block": "nvl-r2", "nodes": "gb2-t01,gb2-t02"},
        ],
    }
    assert tree["tree"]["switches"] == [
        {"switch": "ib-l1", "nodes": "gb1-t01,gb2-t01"},
        {"switch": "ib-l2", "nodes": "gb1-t02,gb2-t02"},
        {"switch": "ib-spine", "children": "ib-l1,ib-l2"},
    ]
    # topology.conf (Slurm before 25.05) keeps the blocks alone, and the group vars carry both.
    assert topology_conf(plan.topology).plugin == BLOCK
    assert plan.group_vars["slurm_topology_yaml"] == topology_yaml(plan.topology)
    # The default partition's jobs are placed by the blocks, as with topology.conf.
    assert placement(plan.topology, ["gb1-t01", "gb1-t02"]) == ("--segment=2",)


def test_topology_yaml_is_only_where_both_matter(tmp_path):
    # Blocks alone (the racks' leaves add nothing to an NVL72's domains), a tree alone, or no
    # declared topology: topology.conf says all there is, and no variable is given.
    for i, bp in enumerate((nvl72_site(racks=2, trays=2), hgx_rails())):
        (tmp_path / str(i)).mkdir()
        plan = plan_of(tmp_path / str(i), bp)
        assert topology_yaml(plan.topology) == ""
        assert "slurm_topology_yaml" not in plan.group_vars
    plan = compile_effective(load_effective(ROOT / "blueprints" / "baremetal-slurm.yaml"))
    assert "slurm_topology_yaml" not in plan.group_vars
