"""The smoke_train role's serving task (tasks/serving.yml, off by default): run by the venv's
own ansible-playbook over this machine's localhost, it ships the collection's validators, runs
the serving smoke job with the arguments rackform hands it, fetches the report and fails the
node when a check failed. The job on CPU (this machine's torch), a tiny model in a directory
standing in for the model mount; objectives no node meets, so the role must fail, naming the
node."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import yaml
from gpu_collection import ROLES_DIR
from local_play import output, play, recap

from validators import serving_model

ARGS = [
    "--device", "cpu", "--concurrency", "2", "--prompt-tokens", "8", "--output-tokens", "4",
    "--ttft-p99-ms", "0.0001", "--itl-p99-ms", "0.0001", "--layers", "2", "--hidden", "64",
    "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--dtype-bytes", "2",
]  # fmt: skip


def test_the_serving_job_is_off_by_default():
    defaults = yaml.safe_load((ROLES_DIR / "smoke_train/defaults/main.yml").read_text())
    assert defaults["smoke_train_serving"] is False


def test_a_failed_serving_check_fails_the_node_with_its_report_fetched(tmp_path):
    for d in ("smoke/reports", "fetch", "scratch", "mount"):
        (tmp_path / d).mkdir(parents=True)
    tiny = serving_model.STANDINS["tiny"]
    model = serving_model.write_standin(
        str(tmp_path / "mount"), tiny, torch.bfloat16, 0, torch.device("cpu")
    )
    tasks = [
        {
            "name": "the role's serving smoke job",
            "ansible.builtin.include_role": {
                "name": "rackform.gpu.smoke_train",
                "tasks_from": "serving",
            },
            "vars": {
                "smoke_train_venv": str(Path(sys.executable).parent.parent),
                "smoke_train_dir": str(tmp_path / "smoke"),
                "smoke_train_report_dir": str(tmp_path / "smoke/reports"),
                "smoke_train_fetch_dir": str(tmp_path / "fetch"),
                "smoke_train_serving_scratch": str(tmp_path / "scratch"),
                "smoke_train_serving_timeout_s": 120,
                "smoke_train_serving_args": [*ARGS, "--model-path", model],
            },
        }
    ]
    done = play(tmp_path, tasks, name="serving")
    assert recap(done)["failed"] == 1, output(done)
    assert "the serving smoke job failed on localhost (exit 1)" in done.stdout, output(done)
    doc = json.loads((tmp_path / "fetch/serving_smoke/localhost.json").read_text())
    checks = {c["name"]: c["status"] for c in doc["checks"]}
    assert checks["model_load"] == checks["generation"] == checks["model_shape"] == "pass"
    assert checks["ttft_p99"] == checks["itl_p99"] == "fail"
    assert doc["job"]["deadline_s"] == 120.0
    assert (tmp_path / "smoke/validators/serving_smoke.py").is_file()
