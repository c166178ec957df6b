"""Held-out-style blueprints for the topology tests, built as data and loaded through the real
loader: a site of GB200 NVL72 racks (NVLink domains of 18 trays) and an HGX B200 site on a
rail-optimized leaf / spine fabric."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.model import Plan


def nvl72_site(racks: int = 3, trays: int = 18, **top: Any) -> dict:
    """`racks` GB200 NVL72 racks of `trays` compute trays each (4 GPUs a tray), one node group
    whose system makes each rack one NVLink domain, on InfiniBand, with Slurm."""
    hosts = [
        {"name": f"gb{r}-t{t:02d}", "address": f"10.80.{r}.{t + 10}", "rack": f"r{r}"}
        for r in range(1, racks + 1)
        for t in range(1, trays + 1)
    ]
    return {
        "name": "nvl-site",
        "purpose": "training",
        "owner": "hpc@example.com",
        "target": {
            "type": "colocation",
            "site": "ash1",
            "racks": [{"name": f"r{r}", "power_kw": 132} for r in range(1, racks + 1)],
        }
        | top.pop("target", {}),
        "node_groups": [
            {
                "name": "gb",
                "gpu": "GB200",
                "gpus_per_node": 4,
                "system": "GB200-NVL72",
                "hosts": hosts,
            }
        ],
        "network": {"fabric": "infiniband", "gbps_per_node": 1600},
        "scheduler": {
            "type": "slurm",
            "controller": "gb1-t01",
            "partitions": [{"name": "batch", "node_groups": ["gb"], "default": True}],
        },
        **top,
    }


def hgx_rails(units: int = 2, per_unit: int = 4, **top: Any) -> dict:
    """HGX B200 nodes in `units` scalable units of `per_unit` nodes: each unit's nodes share
    their 8 rail switches (one leaf for Slurm), two spines above the units."""
    hosts = [
        {"name": f"b200-{u}{n}", "address": f"10.90.{u}.{n + 10}", "rack": f"su{u}"}
        for u in range(1, units + 1)
        for n in range(1, per_unit + 1)
    ]
    leaves = [
        {"name": f"su{u}-rails", "nodes": [h["name"] for h in hosts if h["rack"] == f"su{u}"]}
        for u in range(1, units + 1)
    ]
    spine = {"name": "spine", "switches": [leaf["name"] for leaf in leaves]}
    return {
        "name": "b200-site",
        "purpose": "training",
        "owner": "hpc@example.com",
        "target": {"type": "bare_metal"},
        "node_groups": [{"name": "b200", "gpu": "B200", "gpus_per_node": 8, "hosts": hosts}],
        "network": {"fabric": "infiniband", "gbps_per_node": 3200},
        "topology": {"switches": [*leaves, spine]},
        "scheduler": {
            "type": "slurm",
            "controller": "b200-11",
            "partitions": [{"name": "batch", "node_groups": ["b200"], "default": True}],
        },
        **top,
    }


def write(tmp_path: Path, data: dict, name: str = "bp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def plan_of(tmp_path: Path, data: dict) -> Plan:
    return compile_effective(load_effective(write(tmp_path, data)))
