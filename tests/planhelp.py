"""Blueprints for the Pulumi tests, and the offline run that records what the program creates.

The recording runs the real program under Pulumi's mock runtime (the engine and the cloud are
what this machine cannot reach); what it records is every resource the program registers.
"""

from __future__ import annotations

import copy
import inspect
from pathlib import Path
from typing import Any

import yaml

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.stack.offline import Record, record, record_stacks
from rackform.targets.runtimes import runtime

AWS_TRAINING: dict[str, Any] = {
    "name": "t-train",
    "purpose": "training",
    "owner": "team@example.com",
    "target": {
        "type": "aws",
        "region": "us-east-1",
        "availability_zone": "us-east-1a",
        "ssh_cidrs": ["10.20.0.0/16"],
    },
    "node_groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "count": 2}],
    "network": {"fabric": "efa"},
    "workload": {"model_params_b": 7, "method": "full", "checkpoint_interval_min": 30},
    "lifecycle": {"idle": {"gpu_util_below_pct": 10, "for_minutes": 60, "action": "destroy"}},
}

AWS_INFERENCE: dict[str, Any] = {
    "name": "t-serve",
    "purpose": "inference",
    "owner": "team@example.com",
    "target": {
        "type": "aws",
        "region": "us-west-2",
        "availability_zone": "us-west-2b",
        "ssh_cidrs": ["10.30.0.0/16"],
    },
    "node_groups": [
        {
            "name": "serve",
            "instance_type": "g6e.12xlarge",
            "count": 2,
            "min_count": 1,
            "max_count": 6,
        }
    ],
    "network": {"fabric": "ethernet"},
}

BARE_METAL: dict[str, Any] = {
    "name": "t-metal",
    "purpose": "training",
    "owner": "team@example.com",
    "target": {"type": "bare_metal", "ssh_user": "ubuntu", "ssh_port": 2222},
    "node_groups": [
        {
            "name": "hgx",
            "gpu": "H100-SXM",
            "gpus_per_node": 8,
            "hosts": [
                {"name": "n1", "address": "10.0.0.1"},
                {"name": "n2", "address": "10.0.0.2", "port": 22},
            ],
        }
    ],
    "network": {"fabric": "infiniband"},
}

COLOCATION: dict[str, Any] = {
    "name": "t-colo",
    "purpose": "inference",
    "owner": "team@example.com",
    "target": {
        "type": "colocation",
        "site": "FR5-cage-1",
        "racks": [{"name": "r1", "power_kw": 12}, {"name": "r2", "power_kw": 12}],
    },
    "node_groups": [
        {
            "name": "l40s",
            "gpu": "L40S",
            "gpus_per_node": 8,
            "hosts": [
                {"name": "c1", "address": "192.0.2.1", "rack": "r1"},
                {"name": "c2", "address": "192.0.2.2", "rack": "r2"},
                {"name": "c3", "address": "192.0.2.3", "rack": "r2"},
            ],
        }
    ],
    "network": {"fabric": "ethernet"},
}


def variant(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of `base` with dotted-path changes: variant(B, **{"target.market": "spot"})."""
    out = copy.deepcopy(base)
    for dotted, value in changes.items():
        node = out
        *head, last = dotted.split(".")
        for step in head:
            node = node[int(step)] if isinstance(node, list) else node[step]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return out


def write_blueprint(tmp: Path, doc: dict[str, Any], name: str = "bp.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def plan(tmp: Path, doc: dict[str, Any], env: str | None = None, **providers) -> list[Record]:
    plan = compile_effective(load_effective(write_blueprint(tmp, doc), env))
    return record(plan, runtime(plan.target_type), **providers)


def plan_all(tmp: Path, doc: dict[str, Any], env: str | None = None) -> list[Record]:
    """Every stack's records, the data tier's own stack first where the plan has one."""
    p = compile_effective(load_effective(write_blueprint(tmp, doc), env))
    return [r for _, records in record_stacks(p, runtime(p.target_type)) for r in records]


def of_type(records: list[Record], suffix: str) -> list[Record]:
    """Records whose type ends with `suffix` (e.g. "ec2/instance:Instance")."""
    return [r for r in records if r.type.endswith(suffix)]


def one(records: list[Record], suffix: str) -> Record:
    found = of_type(records, suffix)
    assert len(found) == 1, f"expected one {suffix}, found {[r.name for r in found]}"
    return found[0]


def aws_class(type_token: str):
    """The pulumi_aws class of a type token, e.g. aws:ec2/vpc:Vpc -> pulumi_aws.ec2.Vpc."""
    import importlib

    _, module, cls = type_token.split(":")
    return getattr(importlib.import_module("pulumi_aws." + module.split("/")[0]), cls)


def taggable(type_token: str) -> bool:
    """Whether the AWS resource takes tags, as its own SDK class says."""
    return "tags" in inspect.signature(aws_class(type_token)._internal_init).parameters


# A spot training cluster with Slurm: hyphens in the cluster's and the node groups' names (the
# nodes' names are made of them), the stack's own controller instance.
AWS_SLURM: dict[str, Any] = {
    **AWS_TRAINING,
    "name": "llm-train-a",
    "target": {**AWS_TRAINING["target"], "market": "spot", "ami": {"image": "ubuntu-24.04"}},
    "node_groups": [
        {"name": "gpu-a", "instance_type": "p5.48xlarge", "count": 2},
        {"name": "gpu-a-1", "instance_type": "p5.48xlarge", "count": 1},
    ],
    "scheduler": {
        "type": "slurm",
        "partitions": [
            {"name": "batch", "node_groups": ["gpu-a"], "default": True, "priority_tier": 5},
            {"name": "spare", "node_groups": ["gpu-a", "gpu-a-1"], "preemptible": True},
        ],
    },
    "environments": {"dev": {}},
}
