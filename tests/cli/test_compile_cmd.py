"""`rackform compile`: the files it writes, and a rerun that is byte-identical."""

from __future__ import annotations

import json

import yaml
from blueprint_helpers import ROOT, rackform


def _snapshot(d):
    return {p.relative_to(d): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_compile_writes_and_reruns_identically(tmp_path):
    out = tmp_path / "out"
    r = rackform("compile", "blueprints/baremetal-training.yaml", "--env", "staging", "-o", out)
    assert r.returncode == 0, r.stderr
    first = _snapshot(out)
    assert set(map(str, first)) == {
        "blueprint.effective.json",
        "Pulumi.dc1-train-staging.yaml",
        "inventory/hosts.yml",
        "inventory/group_vars/all.yml",
    }
    assert (
        rackform(
            "compile", "blueprints/baremetal-training.yaml", "--env", "staging", "-o", out
        ).returncode
        == 0
    )
    assert _snapshot(out) == first

    eff = json.loads(first[next(p for p in first if p.name == "blueprint.effective.json")])
    assert eff["environment"] == "staging" and eff["digest"].startswith("sha256:")
    assert "environments" not in eff["blueprint"]
    inv = yaml.safe_load((out / "inventory/hosts.yml").read_text())
    hosts = inv["all"]["children"]["gpu_nodes"]["children"]["ng_hgx"]["hosts"]
    assert hosts == {
        "hgx-01": {"ansible_host": "10.50.0.11", "ansible_port": 22},
        "hgx-02": {"ansible_host": "10.50.0.12", "ansible_port": 22},
    }
    gv = yaml.safe_load((out / "inventory/group_vars/all.yml").read_text())
    assert gv["nccl_rdma_fabric"] == "infiniband"
    assert gv["nvidia_driver_fabric_manager"] is True
    assert gv["nvme_raid_allow_wipe"] is False
    stack = yaml.safe_load((out / "Pulumi.dc1-train-staging.yaml").read_text())
    assert stack["config"] == {
        "rackform:blueprint": "blueprints/baremetal-training.yaml",
        "rackform:environment": "staging",
    }


def test_compile_aws_sets_region(tmp_path):
    r = rackform("compile", ROOT / "blueprints/aws-training.yaml", "-e", "dev", "-o", tmp_path)
    assert r.returncode == 0, r.stderr
    stack = yaml.safe_load((tmp_path / "Pulumi.llm-train-a-dev.yaml").read_text())
    assert stack["config"]["aws:region"] == "us-east-1"


def test_compile_invalid_writes_nothing(tmp_path, write):
    bad = write("name: x\n")
    r = rackform("compile", bad, "-o", tmp_path / "out")
    assert r.returncode == 2
    assert not (tmp_path / "out").exists()


def test_compile_writes_the_data_tiers_stack_config_where_it_has_one(tmp_path):
    doc = yaml.safe_load((ROOT / "blueprints/aws-training.yaml").read_text())
    doc["storage"] = {**doc.get("storage", {}), "shared": {"fsx": {"storage_tib": 2.4}}}
    bp = tmp_path / "kept.yaml"
    bp.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = rackform("compile", bp, "-e", "dev", "-o", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    cluster = yaml.safe_load((tmp_path / "out/Pulumi.llm-train-a-dev.yaml").read_text())["config"]
    data = yaml.safe_load((tmp_path / "out/Pulumi.llm-train-a-dev-data.yaml").read_text())
    assert data["config"] == {**cluster, "rackform:tier": "data"}
