"""An inference cluster's Validate stage runs the serving checks, never the training smoke job:
the stage's inputs as the program gives them under Pulumi's mocks, then its work
(`validate_cluster`) run for real with ansible-playbook over this machine's localhost, a fake
`nvidia-smi` on PATH standing in for the driver's tool (this machine has no GPU)."""

from __future__ import annotations

import json
import stat
import sys

import pytest
from planhelp import AWS_INFERENCE, AWS_TRAINING, one, plan

from rackform.acceptance.cluster import validate_cluster
from rackform.stack.stages import judge


def fake_nvidia_smi(bin_dir, gpus: int) -> None:
    answers = {
        "index,driver_version": "".join(f"{i}, 550.90.07\n" for i in range(gpus)),
        "index,ecc.errors.uncorrected.volatile.total": "".join(f"{i}, 0\n" for i in range(gpus)),
        "index,remapped_rows.pending,remapped_rows.failure": "".join(
            f"{i}, No, No\n" for i in range(gpus)
        ),
    }
    exe = bin_dir / "nvidia-smi"
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"answers = json.loads({json.dumps(json.dumps(answers))})\n"
        "q = [a for a in sys.argv[1:] if a.startswith('--query-gpu=')][0].split('=', 1)[1]\n"
        "sys.stdout.write(answers[q])\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


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
