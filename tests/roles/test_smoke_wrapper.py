"""The shell smoke_train runs the job in (`_smoke_train_wrapper`, taken from the role's vars as
Ansible gets it): it gives the job the fabric's environment file when there is one, and writes the
job's exit status to the file the controller waits on, whatever happens, including a broken
environment file (else the controller would wait until the job's deadline)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from gpu_collection import ROLES_DIR

ROLE = ROLES_DIR / "smoke_train"
WRAPPER = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_smoke_train_wrapper"]
JOB = ["/bin/sh", "-c", 'echo "ifname=$GLOO_SOCKET_IFNAME debug=$NCCL_DEBUG"; exit 3']


def run(tmp_path: Path, env_file: Path) -> tuple[subprocess.CompletedProcess, Path]:
    exit_file = tmp_path / "job.exit"
    proc = subprocess.run(
        ["/bin/sh", "-c", WRAPPER, "smoke", str(exit_file), str(env_file), *JOB],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin"},
    )
    return proc, exit_file


def test_the_job_gets_the_environment_file_and_its_exit_status_is_written(tmp_path):
    env = tmp_path / "nccl.env"
    env.write_text("# the fabric's settings\n\nGLOO_SOCKET_IFNAME=priv0\nNCCL_DEBUG=WARN\n")
    proc, exit_file = run(tmp_path, env)
    assert proc.stdout.strip() == "ifname=priv0 debug=WARN"
    assert proc.returncode == 3
    assert exit_file.read_text().strip() == "3"
    assert not exit_file.with_name("job.exit.tmp").exists()


def test_without_an_environment_file_the_job_runs_as_it_is(tmp_path):
    proc, exit_file = run(tmp_path, tmp_path / "absent.env")
    assert proc.stdout.strip() == "ifname= debug="
    assert exit_file.read_text().strip() == "3"


@pytest.mark.parametrize("text", ["if then fi (\n", "GLOO_SOCKET_IFNAME=priv0\nfalse\n"])
def test_a_broken_environment_file_fails_the_job_and_still_writes_its_status(tmp_path, text):
    env = tmp_path / "nccl.env"
    env.write_text(text)
    proc, exit_file = run(tmp_path, env)
    assert "ifname=" not in proc.stdout  # the job did not start
    assert proc.returncode != 0
    assert exit_file.read_text().strip() == str(proc.returncode)
