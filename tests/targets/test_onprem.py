"""Bare metal and colocation under Pulumi's mock runtime: one Host per host, racks with their
power under a colocation site, nothing in a cloud."""

from __future__ import annotations

import json

import pytest
from planhelp import BARE_METAL, COLOCATION, of_type, plan


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
