"""Blueprints for preflight tests, built as data and loaded through the real loader."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.model import Plan
from rackform.preflight.base import Finding
from rackform.preflight.report import findings


def aws(
    instance: str = "p5.48xlarge",
    count: int = 1,
    fabric: str = "efa",
    workload: dict | None = None,
    purpose: str = "training",
    **top: Any,
) -> dict:
    return {
        "name": "pf-test",
        "purpose": purpose,
        "owner": "team@example.com",
        "target": {
            "type": "aws",
            "region": "us-east-1",
            "availability_zone": "us-east-1a",
            "ssh_cidrs": ["10.20.0.0/16"],
            **top.pop("target", {}),
        },
        "node_groups": [{"name": "gpu", "instance_type": instance, "count": count}],
        "network": {"fabric": fabric},
        **({"workload": workload} if workload else {}),
        **top,
    }


def bare(
    gpu: str = "H100-SXM",
    gpus_per_node: int = 8,
    hosts: int = 1,
    fabric: str = "infiniband",
    workload: dict | None = None,
    **top: Any,
) -> dict:
    return {
        "name": "pf-bare",
        "purpose": "training",
        "owner": "team@example.com",
        "target": {"type": "bare_metal", **top.pop("target", {})},
        "node_groups": [
            {
                "name": "hgx",
                "gpu": gpu,
                "gpus_per_node": gpus_per_node,
                "hosts": [{"name": f"n{i}", "address": f"10.0.0.{i + 1}"} for i in range(hosts)],
            }
        ],
        "network": {"fabric": fabric},
        **({"workload": workload} if workload else {}),
        **top,
    }


def load(tmp_path: Path, data: dict, name: str = "bp.yaml") -> Plan:
    """The blueprint written to a file, loaded and compiled (what preflight runs over)."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return compile_effective(load_effective(path))


class Unreadable:
    """An effective blueprint no rule may read: every attribute is an error."""

    def __getattr__(self, name):
        raise AssertionError(f"a preflight rule read the blueprint (.{name})")


def found(tmp_path: Path, data: dict) -> dict[str, Finding]:
    """The findings of a blueprint by code (each rule reports a code at most once here). The
    rules get the plan without its blueprint: what they compare must come with the plan."""
    out: dict[str, Finding] = {}
    blind = dataclasses.replace(load(tmp_path, data), effective=Unreadable())
    for f in findings(blind):
        assert f.code not in out, f"{f.code} reported twice"
        out[f.code] = f
    return out
