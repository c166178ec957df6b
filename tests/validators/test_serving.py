"""What a serving node's validation checks (validators/serving.py), against the CSV nvidia-smi
prints for these queries (this machine has no GPU: a fake `nvidia-smi` on PATH stands in for the
driver's tool, answering from a table). The module runs as a node runs it: from the shipped
validators (the collection's copy), with the standard library only."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from smoke_helpers import ROOT

from validators import serving as sc
from validators.report import FAIL, NOT_RUN, PASS, checks_of

# Four L40S on driver 550, as nvidia-smi answers each query (csv,noheader,nounits).
ANSWERS = {
    "index,driver_version": "0, 550.90.07\n1, 550.90.07\n2, 550.90.07\n3, 550.90.07\n",
    "index,ecc.errors.uncorrected.volatile.total": "0, 0\n1, 0\n2, 0\n3, 0\n",
    "index,remapped_rows.pending,remapped_rows.failure": "0, No, No\n1, No, No\n2, No, No\n3, No, No\n",
}


def smi(answers):
    def query(fields):
        key = ",".join(fields)
        if key not in answers:
            raise RuntimeError(f'nvidia-smi exited 2: Field "{fields[-1]}" is not a valid field')
        return answers[key]

    return query


def by_name(checks):
    return {c.name: c for c in checks}


def test_a_healthy_serving_node_passes_every_check(tmp_path):
    got = by_name(sc.gpu_checks(smi(ANSWERS), 4, "550-open"))
    assert {n: c.status for n, c in got.items()} == dict.fromkeys(sc.CHECKS[:4], PASS)
    assert got["gpu_count"].measured == 4 and got["driver_branch"].expected == "550"
    assert got["ecc_uncorrectable"].detail == got["row_remap"].detail == "4 GPUs read"


def test_a_missing_gpu_an_ecc_error_a_pending_remap_and_another_driver_fail():
    answers = {
        "index,driver_version": "0, 550.90.07\n1, 535.183.01\n2, 550.90.07\n",
        "index,ecc.errors.uncorrected.volatile.total": "0, 0\n1, 3\n2, 0\n",
        "index,remapped_rows.pending,remapped_rows.failure": "0, No, No\n1, No, No\n2, Yes, No\n",
    }
    got = by_name(sc.gpu_checks(smi(answers), 4, "550"))
    assert got["gpu_count"].status == FAIL and got["gpu_count"].measured == 3
    assert got["driver_branch"].status == FAIL and "535.183.01" in got["driver_branch"].detail
    # Judged as the host checks judge what NVML reads (validators/gpu_memory.py).
    ecc = got["ecc_uncorrectable"]
    assert (ecc.status, ecc.measured, ecc.unit, ecc.detail) == (FAIL, 3, "errors", "GPU 1: 3")
    remap = got["row_remap"]
    assert (remap.status, remap.measured) == (FAIL, 1)
    assert remap.detail == "GPU 2: remap pending (reset the GPU)"


def test_a_gpu_nvidia_smi_cannot_read_fails_as_under_nvml():
    answers = {
        **ANSWERS,
        "index,ecc.errors.uncorrected.volatile.total": "0, 0\n1, [Unknown Error]\n2, 0\n3, 0\n",
        "index,remapped_rows.pending,remapped_rows.failure": "0, No, No\n1, No, Yes\n",
    }
    got = by_name(sc.gpu_checks(smi(answers), 4, "550"))
    assert got["ecc_uncorrectable"].status == FAIL
    assert got["ecc_uncorrectable"].detail == "GPU 1: unreadable ([Unknown Error])"
    assert got["row_remap"].status == FAIL and got["row_remap"].detail == "GPU 1: remap failed"


def test_what_a_gpu_or_this_nvidia_smi_cannot_report_is_not_run_never_passed():
    answers = {
        "index,driver_version": "0, 550.90.07\n",
        "index,ecc.errors.uncorrected.volatile.total": "0, [N/A]\n",
        # an older nvidia-smi: no remapped_rows fields at all
    }
    got = by_name(sc.gpu_checks(smi(answers), 1, "550"))
    assert got["ecc_uncorrectable"].status == NOT_RUN
    assert got["row_remap"].status == NOT_RUN and "not a valid field" in got["row_remap"].detail


def test_no_driver_fails_where_gpus_are_expected_and_is_not_run_where_none_are():
    def absent(fields):
        raise RuntimeError("nvidia-smi is not installed (no NVIDIA driver)")

    got = by_name(sc.gpu_checks(absent, 4, "550"))
    assert got["gpu_count"].status == FAIL
    assert {c.status for n, c in got.items() if n != "gpu_count"} == {NOT_RUN}
    assert {c.status for c in sc.gpu_checks(absent, 0, "550")} == {NOT_RUN}


def test_the_model_mount_must_be_a_mounted_filesystem(tmp_path):
    assert sc.mount_check("/").status == PASS
    plain = sc.mount_check(str(tmp_path))
    assert plain.status == FAIL and plain.measured == "not mounted"
    assert sc.mount_check(str(tmp_path / "nope")).measured == "missing"
    assert sc.mount_check("").status == NOT_RUN


def test_the_module_runs_from_the_shipped_validators_with_nvidia_smi_from_path(tmp_path):
    # As the node bootstrap and the Validate stage run it: the collection's copy of validators/,
    # with a fake nvidia-smi; the report is validators/report.py's document.
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(
        f"#!{sys.executable}\nimport sys, json\n"
        f"answers = json.loads({json.dumps(json.dumps(ANSWERS))})\n"
        "q = [a for a in sys.argv[1:] if a.startswith('--query-gpu=')][0].split('=', 1)[1]\n"
        "sys.stdout.write(answers[q])\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}",
    }
    argv = [sys.executable, "-m", "validators.serving", "--expect-gpus", "4"]
    argv += ["--driver-branch", "550"]

    def run(mount):
        return subprocess.run(
            [*argv, "--mount", mount], capture_output=True, text=True, env=env, cwd=ROOT
        )

    ok = run("/")
    assert ok.returncode == 0, ok.stderr
    assert {c.status for c in checks_of(json.loads(ok.stdout))} == {PASS}
    bad = run(str(tmp_path))
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    assert [c.name for c in checks_of(doc) if c.status == FAIL] == ["model_mount"]
    assert doc["ok"] is False and doc["summary"] == {"pass": 4, "fail": 1, "not-run": 0}
