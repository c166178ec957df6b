"""The blueprint's topology: what cannot be built is refused at its file, line and field."""

from __future__ import annotations

import pytest
from topology_bp import hgx_rails, nvl72_site, write

from rackform.blueprint.loader import load_effective
from rackform.blueprint.problems import BlueprintError


def problems(tmp_path, data) -> list[tuple[int | None, str, str]]:
    with pytest.raises(BlueprintError) as exc:
        load_effective(write(tmp_path, data))
    return [(p.line, p.path, p.message) for p in exc.value.problems]


def test_the_sites_validate(tmp_path):
    assert load_effective(write(tmp_path, nvl72_site(racks=2))).blueprint.node_groups[0].system
    assert load_effective(write(tmp_path, hgx_rails())).blueprint.topology.switches


def test_a_domain_larger_than_its_system_allows(tmp_path):
    bp = nvl72_site(racks=1, trays=19)
    hosts = bp["node_groups"][0]["hosts"]
    bp["topology"] = {"nvlink_domains": [{"name": "big", "nodes": [h["name"] for h in hosts]}]}
    (p,) = problems(tmp_path, bp)
    assert p[1] == "topology.nvlink_domains[0].nodes"
    assert p[2] == "domain 'big' has 19 nodes: a GB200-NVL72 domain joins at most 18 nodes"
    # Located: the domain's `nodes` in the written file (its list starts under the key).
    text = (tmp_path / "bp.yaml").read_text().splitlines()
    assert (text[p[0] - 2].strip(), text[p[0] - 1].strip()) == ("nodes:", "- gb1-t01")


def test_hgx_nodes_make_no_domain_of_two(tmp_path):
    bp = hgx_rails()
    bp["topology"]["nvlink_domains"] = [{"name": "pair", "nodes": ["b200-11", "b200-12"]}]
    ((_, path, message),) = problems(tmp_path, bp)
    assert path == "topology.nvlink_domains[0].nodes"
    assert message.startswith("domain 'pair' has 2 nodes: a HGX-B200 domain joins at most 1")


def test_trays_of_one_domain_in_two_racks_and_a_node_in_two_domains(tmp_path):
    bp = nvl72_site(racks=2)
    bp["topology"] = {
        "nvlink_domains": [
            {"name": "a", "nodes": ["gb1-t01", "gb2-t01"]},
            {"name": "b", "nodes": ["gb1-t02", "gb1-t01"]},
        ]
    }
    found = {(path, message) for _, path, message in problems(tmp_path, bp)}
    assert found == {
        (
            "topology.nvlink_domains[0].nodes",
            "the trays of domain 'a' are in 2 racks (gb1-t01 in r1, gb2-t01 in r2)",
        ),
        ("topology.nvlink_domains[1].nodes[1]", "node 'gb1-t01' is in domain 'a' already"),
    }


def test_unknown_nodes_and_switches_and_a_node_on_no_leaf(tmp_path):
    bp = hgx_rails(units=2, per_unit=2)
    bp["topology"]["switches"][0]["nodes"] = ["b200-11", "b200-99"]
    bp["topology"]["switches"][2]["switches"] = ["su1-rails", "su3-rails"]
    found = {(path, message) for _, path, message in problems(tmp_path, bp)}
    assert found == {
        ("topology.switches[0].nodes[1]", "'b200-99' is no node of this blueprint"),
        ("topology.switches[2].switches[1]", "'su3-rails' is no other switch of topology.switches"),
        ("topology.switches", "node 'b200-12' is on no leaf switch"),
    }


def test_names_reach_topology_conf_only_when_safe(tmp_path):
    bp = hgx_rails()
    bp["topology"]["switches"][0]["name"] = "su1 Nodes=evil"
    ((_, path, message),) = problems(tmp_path, bp)
    assert path == "topology.switches[0].name" and "switch or NVLink domain name" in message


def test_a_system_that_does_not_match_the_group(tmp_path):
    bp = hgx_rails()
    bp["node_groups"][0]["system"] = "GB200-NVL72"
    found = {(path, message) for _, path, message in problems(tmp_path, bp)}
    assert found == {
        ("node_groups[0].system", "system GB200-NVL72 carries GB200, not B200"),
        ("node_groups[0].gpus_per_node", "a GB200-NVL72 node has 4 GPUs, not 8"),
    }


def test_aws_takes_domains_from_the_system_not_from_lists(tmp_path):
    bp = {
        "name": "aws-t",
        "purpose": "training",
        "owner": "t@example.com",
        "target": {
            "type": "aws",
            "region": "us-east-1",
            "availability_zone": "us-east-1a",
            "ssh_cidrs": ["10.0.0.0/16"],
        },
        "node_groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "count": 2}],
        "network": {"fabric": "efa"},
        "topology": {"switches": [{"name": "leaf", "nodes": ["x"]}]},
    }
    ((_, path, message),) = problems(tmp_path, bp)
    assert path == "topology.switches" and "the tree comes from the instances' placement" in message
