"""Bare metal and colocation under Pulumi's mock runtime: one Host per host, racks with their
power under a colocation site, nothing in a cloud."""

from __future__ import annotations

import json

import pytest
from planhelp import BARE_METAL, COLOCATION, of_type, one, plan

from rackform.stack.stages import content_hash
from rackform.targets.onprem.cluster import by_group


def test_bare_metal_registers_each_host_and_creates_nothing_in_a_cloud(tmp_path):
    recs = plan(tmp_path, BARE_METAL)
    assert not [r for r in recs if r.type.startswith("aws:")]
    hosts = of_type(recs, "rackform:Host")
    assert [(h.inputs["name"], h.inputs["address"], h.inputs["port"]) for h in hosts] == [
        ("n1", "10.0.0.1", 2222),
        ("n2", "10.0.0.2", 22),
    ]
    assert all(h.inputs["user"] == "ubuntu" and h.inputs["gpus_per_node"] == 8 for h in hosts)
    assert all(h.parent == "t-metal-default-hosts" for h in hosts)
    assert "__provider" not in hosts[0].inputs


def test_colocation_registers_hosts_under_their_racks_with_power(tmp_path):
    recs = plan(tmp_path, COLOCATION)
    (site,) = of_type(recs, "rackform:colo:Site")
    assert site.inputs == {"racks": 2, "site": "FR5-cage-1"}
    racks = {r.inputs["rack"]: r for r in of_type(recs, "rackform:colo:Rack")}
    assert set(racks) == {"r1", "r2"}
    assert all(r.parent == site.name for r in racks.values())
    # L40S: 350 W per GPU in the catalog, 8 per host; r2 holds two hosts.
    assert racks["r1"].inputs["gpu_kw"] == pytest.approx(2.8)
    assert racks["r2"].inputs["gpu_kw"] == pytest.approx(5.6)
    assert racks["r2"].inputs["power_kw"] == 12
    hosts = {h.inputs["name"]: h for h in of_type(recs, "rackform:Host")}
    assert hosts["c1"].parent == racks["r1"].name
    assert hosts["c3"].parent == racks["r2"].name
    assert hosts["c3"].inputs["site"] == "FR5-cage-1"


def test_over_budget_rack_never_reaches_the_program(tmp_path):
    from rackform.blueprint.problems import BlueprintError

    doc = json.loads(json.dumps(COLOCATION))
    doc["target"]["racks"][1]["power_kw"] = 4
    with pytest.raises(BlueprintError, match="r2"):
        plan(tmp_path, doc)


def test_every_host_keeps_its_own_address_and_port_in_the_configured_inventory(tmp_path):
    # The nodes' list is gathered over every host's outputs at once (by_group): groups of
    # uneven sizes, hyphenated names and ports that differ host by host must still line up.
    doc = json.loads(json.dumps(BARE_METAL))
    doc["node_groups"][0]["hosts"].append({"name": "n3", "address": "10.0.0.3", "port": 2200})
    doc["node_groups"].append(
        {
            "name": "cpu-pool",
            "hosts": [
                {"name": "c-1", "address": "10.0.1.1", "port": 2201},
                {"name": "c-2", "address": "10.0.1.2"},
            ],
        }
    )
    configure = one(plan(tmp_path, doc), "rackform:Configure").inputs
    inv = configure["inventory"]
    groups = inv["all"]["children"]["gpu_nodes"]["children"]
    got = {
        h: (v["ansible_host"], v["ansible_port"])
        for g in groups.values()
        for h, v in g["hosts"].items()
    }
    assert got == {
        "n1": ("10.0.0.1", 2222),  # the target's ssh_port
        "n2": ("10.0.0.2", 22),
        "n3": ("10.0.0.3", 2200),
        "c-1": ("10.0.1.1", 2201),
        "c-2": ("10.0.1.2", 2222),
    }
    assert set(groups["ng_cpu_pool"]["hosts"]) == {"c-1", "c-2"}
    # Ints, as the blueprint has them: the wire carries doubles, and a port of 22.0 in the
    # inventory the hash is taken over (the record shows 22 either way) would change the hash.
    assert configure["content_hash"] == content_hash(
        configure["roles_hash"], configure["group_vars"], inv
    )


def test_by_group_lines_names_up_with_the_flat_outputs():
    flat = ["a1", 22.0, "a2", 23.0, "b1", 24]  # ports as the wire carries them: doubles
    groups = [("g-a", ["x", "y"]), ("empty", []), ("g-b", ["z"])]
    got = by_group(groups, flat)
    assert got == {
        "g-a": [["x", "a1", 22], ["y", "a2", 23]],
        "empty": [],
        "g-b": [["z", "b1", 24]],
    }
    assert {type(n[2]) for ns in got.values() for n in ns} == {int}
    with pytest.raises(ValueError):
        by_group([("g", ["x", "y"])], ["a1", 22, "a2"])  # an address without its port
    with pytest.raises(ValueError):
        by_group([("g", ["x", "y"])], ["a1", 22])  # a host without outputs
