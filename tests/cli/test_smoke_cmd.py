"""`rackform smoke` through the real entry point: the host checks and the job under torchrun
on 2 CPU ranks (in a loopback-only network namespace where one can be made), one report as a
table on stdout and JSON on request, exit 1 when a check fails, 2 for a user mistake."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from blueprint_helpers import AWS_TRAINING, BARE_METAL
from smoke_helpers import ROOT, env, env_without_numpy, isolated

FAST = ("--steps", "12")
JOB_FAST = ("--", "--allreduce-max-mb", "0.25")


def smoke(*args, timeout: float = 180, environ=None) -> subprocess.CompletedProcess:
    cmd = [*isolated(), sys.executable, "-m", "rackform", "smoke", *map(str, args)]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env=environ or env(),
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


def by_name(doc) -> dict:
    return {c["name"]: c for c in doc["checks"]}


@pytest.mark.slow
def test_local_run_passes(tmp_path):
    out = tmp_path / "r.json"
    r = smoke("--json", out, *FAST, *JOB_FAST)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "smoke: 2 processes on CPU (gloo)" in r.stderr
    assert r.stdout.splitlines()[0].split()[:2] == ["CHECK", "STATUS"]
    assert "smoke: PASSED" in r.stdout
    doc = json.loads(out.read_text())
    c = by_name(doc)
    for name in ("nvml_gpu_count", "dcgm_diag", "storage_write_ceiling", "loss_drop",
                 "checkpoint_roundtrip", "nccl_transport", "job_completed"):  # fmt: skip
        assert name in c
    assert c["job_completed"]["status"] == "pass"
    assert c["job_completed"]["detail"] == "all 2 ranks reached the end of the job; torchrun exit 0"
    assert doc["complete"] is True
    assert c["storage_write_ceiling"]["measured"] > 0  # fio or O_DIRECT, on the temp dir
    # torchrun's banner, which used to land in the middle of the output, is gone.
    assert "OMP_NUM_THREADS" not in r.stderr + r.stdout
    assert doc["thresholds"]["loss_drop_fraction"]["value"] == 0.2
    # Where the node's time went: host checks, torchrun, and the part of torchrun's time before
    # the job started (imports, rendezvous), each measured
    launch = doc["launch_s"]
    assert set(launch) == {"host_checks", "torchrun", "until_job_started"}
    assert 0 < launch["until_job_started"] < launch["torchrun"]
    assert launch["until_job_started"] + doc["job"]["duration_s"] <= launch["torchrun"]


@pytest.mark.slow
def test_blueprint_gpus_missing_on_cpu_fails(write, tmp_path):
    # The blueprint's checkpoint mount is a plain directory here; naming it explicitly with
    # --checkpoint-dir still checks that it is a mount point.
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    bp = write(BARE_METAL + f"storage: {{checkpoint: {{mount: {ckpt}}}}}\n")
    out = tmp_path / "r.json"
    r = smoke("--blueprint", bp, "--checkpoint-dir", ckpt, "--json", out, *FAST, *JOB_FAST)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "smoke: FAILED" in r.stdout
    doc = json.loads(out.read_text())
    c = by_name(doc)
    # Failed checks are the report's verdict, not a failed rank: every rank reached the end
    # and exited cleanly, so torchrun neither stopped one nor printed a crash.
    assert c["job_completed"]["status"] == "pass"
    assert "ChildFailedError" not in r.stderr and "closing signal" not in r.stderr
    assert "OMP_NUM_THREADS" not in r.stderr
    # The blueprint's group has 2 nodes; this run covered this machine only.
    assert c["node_count"]["status"] == "fail"
    assert (c["node_count"]["measured"], c["node_count"]["expected"]) == (1, 2)
    assert c["node_count"]["detail"].startswith("the run covered 1 of the 2 nodes expected")
    assert "node_count expects 2 nodes of node group hgx" in r.stderr
    assert c["gpu_count"]["status"] == "fail"
    assert (c["gpu_count"]["measured"], c["gpu_count"]["expected"]) == (0, 8)
    assert c["gpu_model"]["status"] == "fail" and "no GPU found" in c["gpu_model"]["detail"]
    assert c["nvml_gpu_count"]["status"] == "fail"
    assert c["checkpoint_mount"]["status"] == "fail"
    assert (
        c["checkpoint_mount"]["detail"] == f"{ckpt} is a plain directory, not a mounted filesystem"
    )
    # The rest still ran and says so; GPU-only checks are not-run, never passed.
    assert c["loss_drop"]["status"] == "pass"
    assert c["checkpoint_roundtrip"]["status"] == "pass"
    assert c["mfu"]["status"] == "not-run"
    assert c["allreduce_busbw"]["status"] == "not-run"
    # The 2-node floor over InfiniBand (0.9 x the catalog's 460), not applied on gloo
    assert c["allreduce_busbw"]["expected"] == 414
    assert doc["thresholds"]["allreduce_busbw_gbps"]["value"] == 414
    assert doc["blueprint"]["digest"].startswith("sha256:")


@pytest.mark.slow
def test_one_node_of_a_group_on_purpose(write, tmp_path):
    """--nodes 1: this run is meant to check one node of the group; node_count passes on
    that, and the thresholds are a single node's."""
    out = tmp_path / "r.json"
    r = smoke("--blueprint", write(BARE_METAL), "--nodes", "1", "--no-host-checks",
              "--json", out, *FAST, *JOB_FAST)  # fmt: skip
    doc = json.loads(out.read_text())
    c = by_name(doc)
    assert c["node_count"]["status"] == "pass", r.stderr
    assert (c["node_count"]["measured"], c["node_count"]["expected"]) == (1, 1)
    assert doc["thresholds"]["allreduce_busbw_gbps"]["value"] == 460
    assert "node_count expects" not in r.stderr


@pytest.mark.slow
def test_killed_rank_fails_fast_naming_the_rank(tmp_path):
    out = tmp_path / "r.json"
    t0 = time.monotonic()
    r = smoke("--no-host-checks", "--json", out, *FAST, *JOB_FAST,
              "--fault-kill-rank", "1", "--fault-step", "3")  # fmt: skip
    took = time.monotonic() - t0
    assert r.returncode == 1
    assert took < 60
    c = by_name(json.loads(out.read_text()))
    job = c["job_completed"]
    assert job["status"] == "fail"
    assert job["detail"].startswith("rank 1 on ")
    assert "SIGKILL" in job["detail"]
    assert c["loss_drop"]["status"] == "not-run"
    assert c["loss_drop"]["detail"] == "the job ended before this check ran"
    assert c["gpu_count"]["status"] == "not-run"  # measured before the death, kept


@pytest.mark.slow
def test_rank_lost_after_the_last_phase_is_not_a_completed_job(tmp_path):
    """Rank 0 is through every phase and its report holds every check, but rank 1 dies before
    the end: the job did not complete. (The launcher used to pass it: rank 0 wrote `complete`
    alone and torchrun's exit 1 read as 'a check failed'; the run said PASSED, exit 0.)"""
    out = tmp_path / "r.json"
    r = smoke("--no-host-checks", "--json", out, *FAST, *JOB_FAST, "--fault-kill-at-end", "1")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    c = by_name(doc)
    job = c["job_completed"]
    assert job["status"] == "fail"
    assert job["detail"].startswith("rank 1 on ") and "SIGKILL" in job["detail"]
    assert doc["complete"] is False
    assert c["loss_drop"]["status"] == "pass"  # measured before the death, kept


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--blueprint", "missing.yaml"], "missing.yaml: no such file"),
        (["--env", "dev"], "--env, --group and --nodes need --blueprint"),
        (["--nodes", "1"], "--env, --group and --nodes need --blueprint"),
        (["--preset", "huge"], "--preset 'huge' is not one of tiny, small, default"),
        (["--json", "/nonexistent/dir/r.json"], "no such directory /nonexistent/dir"),
    ],
)
def test_user_mistakes_exit_2(args, message):
    r = smoke(*args, timeout=60)
    assert r.returncode == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_environment_and_group(write):
    bp = write(BARE_METAL)
    r = smoke("--blueprint", bp, "--env", "qa", timeout=60)
    assert r.returncode == 2 and "unknown environment 'qa'" in r.stderr
    r = smoke("--blueprint", bp, "--group", "big", timeout=60)
    assert r.returncode == 2 and f"{bp}: no node group 'big'; the cluster has hgx" in r.stderr


def test_node_count_beyond_the_group_or_a_parked_group(write):
    bp = write(BARE_METAL)
    r = smoke("--blueprint", bp, "--nodes", "3", timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"{bp}: --nodes 3: the node group hgx has 2 nodes in environment default"
    )
    parked = write(AWS_TRAINING.replace("count: 2", "count: 0"), "parked.yaml")
    r = smoke("--blueprint", parked, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"{parked}: node group gpu has 0 nodes in environment default (parked): "
        "no node to smoke-test"
    )


def test_numpy_missing_is_one_line_before_anything_runs(tmp_path):
    """torch imports without numpy; the job used to die in its first collective, deep in a
    rank, with "Numpy is not available". Now: one line naming the install command, exit 2."""
    r = smoke("--no-host-checks", timeout=60, environ=env_without_numpy(tmp_path))
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"rackform: `smoke` needs numpy beside torch: numpy is not installed for {sys.executable} "
        "(torch.distributed's object collectives and torch.distributed.checkpoint convert "
        "through it): pip install numpy"
    ]
    assert r.stdout == ""
