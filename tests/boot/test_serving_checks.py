"""What a serving node's validation checks (rackform/boot/serving_checks.py), against the CSV
nvidia-smi prints for these queries (this machine has no GPU: a fake `nvidia-smi` on PATH stands
in for the driver's tool, answering from a table)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from rackform.boot import serving_checks as sc

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
    return {c["name"]: c for c in checks}


def test_a_healthy_serving_node_passes_every_check(tmp_path):
    got = by_name(sc.gpu_checks(smi(ANSWERS), 4, "550-open"))
    assert {n: c["status"] for n, c in got.items()} == dict.fromkeys(
        ("gpu_count", "driver_branch", "ecc_uncorrectable", "row_remap"), "pass"
    )
    assert got["gpu_count"]["measured"] == 4 and got["driver_branch"]["expected"] == "550"


def test_a_missing_gpu_an_ecc_error_a_pending_remap_and_another_driver_fail():
    answers = {
        "index,driver_version": "0, 550.90.07\n1, 535.183.01\n2, 550.90.07\n",
        "index,ecc.errors.uncorrected.volatile.total": "0, 0\n1, 3\n2, 0\n",
        "index,remapped_rows.pending,remapped_rows.failure": "0, No, No\n1, No, No\n2, Yes, No\n",
    }
    got = by_name(sc.gpu_checks(smi(answers), 4, "550"))
    assert got["gpu_count"]["status"] == "fail" and got["gpu_count"]["measured"] == 3
    assert (
        got["driver_branch"]["status"] == "fail" and "535.183.01" in got["driver_branch"]["detail"]
    )
    assert (
        got["ecc_uncorrectable"]["status"] == "fail"
        and "GPU 1" in got["ecc_uncorrectable"]["detail"]
    )
    assert got["row_remap"]["status"] == "fail" and "GPU 2" in got["row_remap"]["detail"]


def test_what_a_gpu_or_this_nvidia_smi_cannot_report_is_not_run_never_passed():
    answers = {
        "index,driver_version": "0, 550.90.07\n",
        "index,ecc.errors.uncorrected.volatile.total": "0, [N/A]\n",
        # an older nvidia-smi: no remapped_rows fields at all
    }
    got = by_name(sc.gpu_checks(smi(answers), 1, "550"))
    assert got["ecc_uncorrectable"]["status"] == "not-run"
    assert (
        got["row_remap"]["status"] == "not-run"
        and "not a valid field" in got["row_remap"]["detail"]
    )


def test_no_driver_fails_where_gpus_are_expected_and_is_not_run_where_none_are():
    def absent(fields):
        raise RuntimeError("nvidia-smi is not installed (no NVIDIA driver)")

    got = by_name(sc.gpu_checks(absent, 4, "550"))
    assert got["gpu_count"]["status"] == "fail"
    assert {c["status"] for n, c in got.items() if n != "gpu_count"} == {"not-run"}
    assert {c["status"] for c in sc.gpu_checks(absent, 0, "550")} == {"not-run"}


def test_the_model_mount_must_be_a_mounted_filesystem(tmp_path):
    assert sc.mount_check("/")["status"] == "pass"
    plain = sc.mount_check(str(tmp_path))
    assert plain["status"] == "fail" and plain["measured"] == "not mounted"
    assert sc.mount_check(str(tmp_path / "nope"))["measured"] == "missing"
    assert sc.mount_check("")["status"] == "not-run"


def test_the_script_runs_alone_with_nvidia_smi_from_path(tmp_path):
    # The script is copied to nodes as one file: run it as such, with a fake nvidia-smi.
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(
        f"#!{sys.executable}\nimport sys, json\n"
        f"answers = json.loads({json.dumps(json.dumps(ANSWERS))})\n"
        "q = [a for a in sys.argv[1:] if a.startswith('--query-gpu=')][0].split('=', 1)[1]\n"
        "sys.stdout.write(answers[q])\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    script = tmp_path / "serving_checks.py"
    script.write_bytes(Path(sc.__file__).read_bytes())
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    argv = [sys.executable, str(script), "--expect-gpus", "4", "--driver-branch", "550"]
    ok = subprocess.run([*argv, "--mount", "/"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    assert {c["status"] for c in json.loads(ok.stdout)["checks"]} == {"pass"}
    bad = subprocess.run([*argv, "--mount", str(tmp_path)], capture_output=True, text=True, env=env)
    assert bad.returncode == 1
    assert sc.failed(json.loads(bad.stdout)["checks"])[0]["name"] == "model_mount"
