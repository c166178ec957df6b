"""Colocation rack power: the schema refuses a rack over budget; preflight warns near it."""

from __future__ import annotations

import pytest
from preflight_bp import found, load

from rackform.blueprint.problems import BlueprintError


def colo(budget_kw: float, gpu: str = "L40S") -> dict:
    return {
        "name": "colo-test",
        "purpose": "inference",
        "owner": "team@example.com",
        "target": {
            "type": "colocation",
            "site": "cage-1",
            "racks": [{"name": "r01", "power_kw": budget_kw}, {"name": "r02", "power_kw": 17}],
        },
        "node_groups": [
            {
                "name": "g",
                "gpu": gpu,
                "gpus_per_node": 8,
                "hosts": [
                    {"name": "a", "address": "192.0.2.1", "rack": "r01"},
                    {"name": "b", "address": "192.0.2.2", "rack": "r01"},
                ],
            }
        ],
        "network": {"fabric": "ethernet"},
    }


def test_rack_near_budget_warns_with_the_numbers(tmp_path):
    # 16 x 350 W = 5.6 kW of GPUs, x1.8 for whole servers = 10.08 kW: 92% of 11 kW.
    f = found(tmp_path, colo(11))["rack-power-headroom"]
    assert (f.level, f.path) == ("warning", ("target", "racks", 0, "power_kw"))
    assert "5.6 kW of GPUs, about 10.1 kW for whole servers (x1.8), is 92% of its 11 kW" in (
        f.message
    )


def test_rack_with_headroom_passes(tmp_path):
    assert "rack-power-headroom" not in found(tmp_path, colo(17))


def test_rack_over_budget_is_the_schemas_error_not_a_finding(tmp_path):
    with pytest.raises(BlueprintError) as exc:
        load(tmp_path, colo(5))
    (p,) = exc.value.problems
    assert p.path == "target.racks[0].power_kw" and "5.6 kW" in p.message
