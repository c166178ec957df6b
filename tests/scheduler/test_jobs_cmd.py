"""`rackform jobs`: GPU-hours and cost per job and per account, from a copied log and from the
controller's jobcomp log that real jobs of the local Slurm wrote (read through the ssh seam), and
one clear line for each way it can go wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import fake_ssh
import pytest
from blueprint_helpers import ROOT
from recorded import JOBCOMP, SACCT
from slurm_local import GPUS_PER_NODE, NODES, blueprint, ssh_env

from rackform.engine import prepare
from rackform.reap.run import usd_per_gpu_hour


def rackform(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "rackform", *map(str, args)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip


@pytest.fixture
def bp(tmp_path):
    f = tmp_path / "slurm-a.yaml"
    f.write_text(blueprint())
    return f


def price(bp) -> float:
    return usd_per_gpu_hour(prepare(bp))


def test_a_copied_sacct_output_per_job_and_account(bp, tmp_path):
    log = tmp_path / "sacct.txt"
    log.write_text(SACCT)
    r = rackform("jobs", bp, "--from-file", log, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    usd = price(bp)
    assert doc["usd_per_gpu_hour"] == pytest.approx(usd)
    jobs = {j["id"]: j for j in doc["jobs"]}
    assert (jobs["41"]["gpus"], jobs["41"]["hours"], jobs["41"]["gpu_hours"]) == (16, 2, 32)
    assert jobs["41"]["usd"] == pytest.approx(32 * usd, abs=0.01)
    assert jobs["42"]["running"] and jobs["42"]["gpu_hours"] == 4
    assert {a["account"]: a["gpu_hours"] for a in doc["accounts"]} == {"ml": 32, "research": 4}
    assert doc["total"]["gpu_hours"] == 36
    assert "1 jobs still running: counted to now" in doc["notes"]

    text = rackform("jobs", bp, "--from-file", log)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"slurm-a [default]: 3 jobs from {log}, ${usd:,.2f} per GPU-hour")
    assert any(line.split()[:6] == ["42", "bob", "research", "scavenger", "RUNNING", "(to"]
               for line in lines), lines  # fmt: skip
    assert lines[-2].startswith("total: 3 jobs, 36.000 GPU-hours")


def test_jobs_the_local_slurm_ran_are_counted_from_the_controller_s_log(slurm, bp, tmp_path):
    # Real jobs: two accounts, one on both nodes, one on one; the log is read over the ssh seam.
    done = [
        slurm.sbatch("-A", "ml", "-N2", "--exclusive", "--gres=gpu:1", "--wrap", "sleep 2"),
        slurm.sbatch("-A", "ml", "-w", NODES[1], "--gres=gpu:2", "--wrap", "sleep 1"),
        slurm.sbatch("-A", "research-x", "-p", "scav-low", "-w", NODES[0], "--wrap", "true"),
    ]

    def recorded() -> set[str]:
        text = slurm.jobcomp.read_text() if slurm.jobcomp.exists() else ""
        return {line.split()[0] for line in text.splitlines() if line.strip()}

    assert slurm.wait(lambda: {f"JobId={j}" for j in done} <= recorded(), 60)
    env = ssh_env(slurm, tmp_path)
    r = rackform("jobs", bp, "--log", slurm.jobcomp, "--json", env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["source"] == f"root@10.77.7.1:2222:{slurm.jobcomp}"
    jobs = {j["id"]: j for j in doc["jobs"] if j["id"] in done}
    assert [jobs[j]["account"] for j in done] == ["ml", "ml", "research-x"]
    # No slurmdbd here, so no gres/gpu in the records: each job is charged its nodes' GPUs.
    assert [jobs[j]["gpus"] for j in done] == [2 * GPUS_PER_NODE, GPUS_PER_NODE, GPUS_PER_NODE]
    assert {jobs[j]["gpus_from"] for j in done} == {"nodes"}
    assert 1 <= jobs[done[0]]["seconds"] <= 4  # `sleep 2`, timed by Slurm to the second
    usd = price(bp)
    for j in jobs.values():
        assert j["gpu_hours"] == pytest.approx(j["gpus"] * j["seconds"] / 3600, abs=1e-4)
        assert j["usd"] == pytest.approx(j["gpu_hours"] * usd, abs=0.01)
    assert any("upper bound where jobs share a node" in n for n in doc["notes"])
    call = fake_ssh.calls(tmp_path / "ssh.log")[-1]
    assert (call.user, call.host) == ("root", "10.77.7.1") and str(slurm.jobcomp) in call.remote[-1]


def one_line(r, code: int, expected: str):
    assert r.returncode == code, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_a_line_that_is_no_record_is_named_by_file_and_line(bp, tmp_path):
    log = tmp_path / "slurmctld.log"
    log.write_text(JOBCOMP + "[2026-11-25T10:00:01.123] sched: Allocate JobId=4\n")
    one_line(rackform("jobs", bp, "--from-file", log), 2, f"{log}:2: neither a jobcomp")


def test_an_unreachable_controller_is_exit_3(slurm, bp, tmp_path):
    r = rackform("jobs", bp, env=ssh_env(slurm, tmp_path, fail=True))
    one_line(r, 3, "cannot read the job records: root@10.77.7.1:2222 is not reachable over SSH")


def test_a_missing_log_on_the_controller_is_exit_3_with_where_it_should_be(slurm, bp, tmp_path):
    r = rackform("jobs", bp, env=ssh_env(slurm, tmp_path))  # the role's path, not this Slurm's
    one_line(r, 3, "/var/log/slurm/jobcomp.log on root@10.77.7.1:2222: cat: ")
    assert "JobCompType=jobcomp/filetxt" in r.stderr


def test_no_scheduler_needs_a_copied_log(tmp_path):
    f = tmp_path / "bp.yaml"
    f.write_text(blueprint().split("scheduler:")[0] + "lifecycle: {protect: false}\n")
    one_line(rackform("jobs", f), 2, "declares no scheduler: no controller to read job records")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--since", "last week"], "--since 'last week': give a time such as 2026-11-01T08:00"),
        (["--from-file", "/nonexistent/log"], "/nonexistent/log: No such file or directory"),
    ],
)
def test_bad_input_is_one_line(bp, args, expected):
    one_line(rackform("jobs", bp, *args), 2, expected)


def test_an_ssh_user_that_is_an_ssh_option_never_reaches_ssh(tmp_path):
    """Issue 57's finding as it was found: `ssh_user: "-oProxyCommand=..."` in a blueprint that
    validated, and `rackform jobs` ran the command on this machine (the fake ssh runs a
    ProxyCommand it is given, as ssh does). Now the loader refuses the blueprint at its line and
    no ssh runs at all."""
    marker = tmp_path / "pwned"
    f = tmp_path / "slurm-a.yaml"
    f.write_text(
        blueprint().replace(
            "target: {type: bare_metal,",
            f"target: {{type: bare_metal, ssh_user: '-oProxyCommand=touch {marker} #',",
        )
    )
    env = {**fake_ssh.environ(tmp_path, dict(os.environ)), "FAKE_SSH_RUN_PROXY": "1"}
    r = rackform("jobs", f, "--json", env=env)
    assert not marker.exists()
    assert not (tmp_path / "ssh.log").exists(), "ssh ran"
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith(f"{f}:")]
    assert line.startswith(f"{f}:4:38: target.ssh_user: '-oProxyCommand=touch {marker} #' is not")
