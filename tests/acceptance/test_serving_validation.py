"""An inference cluster's Validate stage runs the serving checks, never the training smoke job:
the stage's inputs as the program gives them under Pulumi's mocks, then its work
(`validate_cluster`) run for real with ansible-playbook over this machine's localhost, a fake
`nvidia-smi` on PATH standing in for the driver's tool (this machine has no GPU)."""

from __future__ import annotations

import sys

import pytest
import yaml
from blueprint_helpers import ROOT
from fake_smi import fake_nvidia_smi
from planhelp import AWS_INFERENCE, AWS_TRAINING, one, plan

from rackform.acceptance.cluster import validate_cluster
from rackform.stack.stages import judge


def localhost(group: str) -> dict:
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return {
        "all": {
            "vars": {},
            "children": {"gpu_nodes": {"children": {group: {"hosts": {"localhost": host}}}}},
        }
    }


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    """The inference Validate resource's inputs, as the program registers them."""
    return one(plan(tmp_path_factory.mktemp("bp"), AWS_INFERENCE), "rackform:Validate").inputs


def test_the_stage_knows_the_cluster_serves_and_each_groups_gpus(stage, tmp_path):
    assert stage["group_vars"]["rackform_purpose"] == "inference"
    assert stage["validation"]["expected"]["groups"]["serve"]["gpus_per_node"] == 4
    training = one(plan(tmp_path, AWS_TRAINING), "rackform:Validate").inputs
    assert training["group_vars"]["rackform_purpose"] == "training"
    # The thresholds reach the stage once, resolved, in the nodes' variables; its validation
    # input is only what the cluster should have.
    assert set(training["validation"]) == {"expected"}
    assert "--busbw-min" in training["group_vars"]["smoke_train_job_args"]


@pytest.mark.parametrize("gpus", [4, 3])
def test_serving_nodes_run_the_serving_checks_and_no_training_job(
    stage, tmp_path, monkeypatch, gpus
):
    fake_nvidia_smi(tmp_path / "bin", gpus)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{__import__('os').environ['PATH']}")
    lines: list[str] = []
    report = validate_cluster(
        inventory=localhost("ng_serve"),
        # The model mount: this machine's root filesystem is a mount point.
        group_vars={**stage["group_vars"], "nvme_raid_mount": "/"},
        validation=stage["validation"],
        access=None,
        out=lines.append,
    )
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    want = "pass" if gpus == 4 else "fail"
    assert statuses == {
        "localhost/gpu_count": want,
        "localhost/driver_branch": "pass",
        "localhost/ecc_uncorrectable": "pass",
        "localhost/row_remap": "pass",
        "localhost/model_mount": "pass",
        "node_reports": "pass",
    }
    assert judge(report)["passed"] is (gpus == 4)
    # Nothing of the training validation ran: no role, no smoke job, no DCGM, no storage probe.
    text = "\n".join(lines)
    assert "Run the serving checks" in text
    assert not any(w in text for w in ("smoke_train", "dcgm", "torchrun", "storage"))


# A serving workload small enough for this machine's CPU: the job writes its stand-in model.
WORKLOAD = {
    "model_params_b": 8,
    "method": "serve",
    "seq_len": 64,
    "serving": {"concurrency": 2, "prompt_tokens": 16, "output_tokens": 4, "itl_p99_ms": 500},
}


def local_hosts(group: str, names: list[str], python: str) -> dict:
    """Several inventory hosts that are all this machine (Ansible's local connection)."""
    host = {"ansible_connection": "local", "ansible_python_interpreter": python}
    return {
        "all": {
            "vars": {},
            "children": {
                "gpu_nodes": {"children": {group: {"hosts": {n: dict(host) for n in names}}}}
            },
        }
    }


@pytest.fixture(scope="module")
def sized(tmp_path_factory):
    """The Validate inputs of a colocation inference blueprint (its nodes pushed to, not
    configured at boot) with a serving workload."""
    doc = yaml.safe_load((ROOT / "blueprints" / "colo-inference.yaml").read_text())
    bp = {**doc, "workload": WORKLOAD}
    return one(plan(tmp_path_factory.mktemp("bp"), bp), "rackform:Validate").inputs


def test_nodes_not_in_service_run_the_serving_smoke_job_and_those_in_service_do_not(
    sized, tmp_path, monkeypatch
):
    """srv-02 is new (not in service): the serving checks and the serving smoke job, for real
    (this machine's virtualenv holds torch's CPU build: the node's smoke_train_venv); srv-01
    serves already: the read-only checks only. One report per node, both kinds merged."""
    fake_nvidia_smi(tmp_path / "bin", 8)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{__import__('os').environ['PATH']}")
    assert sized["group_vars"]["rackform_serving_smoke"]["l40s"]["concurrency"] == 2
    lines: list[str] = []
    report = validate_cluster(
        inventory=local_hosts("ng_l40s", ["srv-01", "srv-02"], sys.executable),
        group_vars={**sized["group_vars"], "nvme_raid_mount": "/", "smoke_train_venv": sys.prefix},
        validation=sized["validation"],
        in_service=["srv-01"],
        out=lines.append,
    )
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert "srv-01/generation" not in statuses, statuses
    assert statuses["srv-01/gpu_count"] == "pass"
    assert statuses["srv-02/gpu_count"] == "pass"
    # The job ran on srv-02 with its stand-in model (no workload.model.path): loaded, generated
    # every request; its rates are reported, not judged against the blueprint's objectives.
    assert statuses["srv-02/model_load"] == "pass", "\n".join(lines[-30:])
    assert statuses["srv-02/generation"] == "pass"
    assert statuses["srv-02/decode_tokens_per_s"] == "not-run"
    decode = next(c for c in report["checks"] if c["name"] == "srv-02/decode_tokens_per_s")
    assert decode["measured"] > 0
    assert report["nodes"]["srv-02"]["checks"][0]["name"] == "gpu_count"
    assert judge(report)["passed"]


def test_a_new_node_whose_job_cannot_run_is_not_passed(sized, tmp_path, monkeypatch):
    """A node without torch in its environment (no bake, no serving play): the job fails
    before it writes a report, and the node fails `serving_smoke` rather than passing on the
    read-only checks alone."""
    fake_nvidia_smi(tmp_path / "bin", 8)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{__import__('os').environ['PATH']}")
    bare = tmp_path / "venv"  # a Python without torch
    (bare / "bin").mkdir(parents=True)
    (bare / "bin" / "python").symlink_to("/usr/bin/python3")
    report = validate_cluster(
        inventory=local_hosts("ng_l40s", ["srv-03"], sys.executable),
        group_vars={**sized["group_vars"], "nvme_raid_mount": "/", "smoke_train_venv": str(bare)},
        validation=sized["validation"],
        out=lambda line: None,
    )
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["srv-03/gpu_count"] == "pass"
    assert statuses["srv-03/serving_smoke"] == "fail", statuses
    assert not judge(report)["passed"]


def test_nodes_configured_at_boot_never_run_the_job_from_the_stage(tmp_path, monkeypatch):
    """An AWS serving group's nodes configure themselves at boot: each ran the serving smoke
    job in its bootstrap and joined the inventory only on a pass, so it may be serving now.
    New to the stage or not, they get the read-only checks only."""
    fake_nvidia_smi(tmp_path / "bin", 4)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{__import__('os').environ['PATH']}")
    bp = {**AWS_INFERENCE, "workload": WORKLOAD}
    stage = one(plan(tmp_path, bp), "rackform:Validate").inputs
    assert stage["validation"]["expected"]["groups"]["serve"]["configured"] == "boot"
    assert stage["group_vars"]["rackform_serving_smoke"]["serve"]
    lines: list[str] = []
    report = validate_cluster(
        inventory=local_hosts("ng_serve", ["srv-04"], sys.executable),
        group_vars={**stage["group_vars"], "nvme_raid_mount": "/"},
        validation=stage["validation"],
        out=lines.append,
    )
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert not any(n.startswith("srv-04/") and n.endswith("generation") for n in statuses)
    assert statuses["srv-04/gpu_count"] == "pass"
    assert "serving smoke job" not in "\n".join(lines)
