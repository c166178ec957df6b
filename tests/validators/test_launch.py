"""The launcher: how a job that ended badly becomes a report that says so, and the deadline
that stops a run whatever it is doing."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loopback import free_port

from validators import launch, report
from validators.report import FAIL, NOT_RUN, PASS, compare

# torchrun's summary (torch 2.13) for a worker killed by SIGKILL, as captured on this machine.
KILLED = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
validators.smoke FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_03:49:38
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 18854)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 18854
============================================================""".splitlines()
ROOT = Path(__file__).resolve().parents[2]

RAISED = """\
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_03:51:43
  host      : node-a
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 20134)
  error_file: /tmp/torchelastic_x/error.json
  traceback : Traceback (most recent call last):
    File "/x/validators/train.py", line 97, in train
      loss.backward()
  RuntimeError: Timed out waiting 5000ms for recv operation to complete

============================================================""".splitlines()


def test_root_cause_of_a_killed_rank():
    why = launch.root_cause(KILLED)
    assert why == (
        "rank 1 on localhost failed: exit code -9 (SIGKILL); Signal 9 (SIGKILL) received by PID 18854"
    )


def test_root_cause_of_an_exception_is_its_last_line():
    why = launch.root_cause(RAISED)
    assert why.startswith("rank 0 on node-a failed: exit code 1; RuntimeError: Timed out waiting")


def test_no_summary_no_root_cause():
    assert launch.root_cause(["all good"]) is None


def _partial() -> dict:
    return report.make(
        [compare("gpu_count", 0, None, "GPUs", "==")],
        complete=False,
        pending=["loss_drop", "checkpoint_roundtrip"],
    )


def test_compose_dead_rank():
    proc = launch.Proc(rc=1, lines=KILLED, timed_out=False)
    doc = launch.compose(None, _partial(), proc, 900)
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["job_completed"]["status"] == FAIL
    assert "rank 1" in checks["job_completed"]["detail"]
    assert "SIGKILL" in checks["job_completed"]["detail"]
    for name in ("loss_drop", "checkpoint_roundtrip"):
        assert checks[name]["status"] == NOT_RUN
        assert checks[name]["detail"] == "the job ended before this check ran"
    assert doc["ok"] is False and doc["complete"] is False


def test_compose_watchdog_line_is_quoted():
    lines = [
        "smoke: rank 1: no progress for 6 s (limit 5 s) during training (last completed step 1); ...",
        *KILLED,
    ]
    doc = launch.compose(None, _partial(), launch.Proc(1, lines, False), 900)
    job = next(c for c in doc["checks"] if c["name"] == "job_completed")
    assert "no progress for 6 s" in job["detail"]


def _done(checks, ranks: int = 2, world: int = 2, **extra) -> dict:
    """A job report as the job writes it once every rank came through the last phase."""
    return report.make(
        checks,
        complete=True,
        pending=[],
        ended={"ranks": ranks, "world_size": world, "hosts": ["n"]},
        job={"world_size": world},
        **extra,
    )


def test_compose_complete_runs():
    done = _done([compare("loss_drop", 0.5, 0.2, "fraction")])
    ok = launch.compose(None, done, launch.Proc(0, [], False), 900)
    assert ok["ok"] and ok["checks"][-1]["status"] == PASS
    host = report.make([compare("ecc_uncorrectable", 1, 0, "errors", "<=")], host={"hostname": "n"})
    merged = launch.compose(host, done, launch.Proc(0, [], False), 900)
    assert [c["name"] for c in merged["checks"]] == [
        "ecc_uncorrectable",
        "loss_drop",
        "job_completed",
    ]
    assert merged["ok"] is False and merged["host"] == {"hostname": "n"}


def test_compose_without_any_report_or_past_the_deadline():
    doc = launch.compose(None, None, launch.Proc(-9, ["boom"], True), 30)
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["job_completed"]["status"] == FAIL
    assert "30 s deadline" in checks["job_completed"]["detail"]
    assert checks["smoke_job_checks"]["status"] == NOT_RUN


def test_deadline_stops_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    # A parent that ignores SIGTERM and a background child: both must be gone afterwards.
    script = f"trap '' TERM; sleep 60 & echo $! > {pidfile}; echo started; wait"
    out = io.StringIO()
    t0 = time.monotonic()
    proc = launch.stream(["sh", "-c", script], timeout_s=1, out=out, grace_s=1)
    took = time.monotonic() - t0
    assert proc.timed_out and "started" in out.getvalue()
    assert took < 10
    child = int(pidfile.read_text())
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{child}") or "Z" in _state(child)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(")")[-1].split()[0]


def test_stream_passes_output_through_and_keeps_the_tail():
    out = io.StringIO()
    code = "import sys\nfor i in range(500): print(i)\nsys.exit(3)"
    proc = launch.stream([sys.executable, "-c", code], timeout_s=30, out=out, keep=10)
    assert proc.rc == 3 and not proc.timed_out
    assert proc.lines == [str(i) for i in range(490, 500)]
    assert out.getvalue().count("\n") == 500


def test_checkpoint_speed_is_shown_against_the_storage_ceiling():
    host = report.make([compare("storage_write_ceiling", 20.0, None, "GB/s")])
    job = _done([compare("checkpoint_write", 5.0, 4.0, "GB/s", detail="dcp")])
    doc = launch.compose(host, job, launch.Proc(0, [], False), 900)
    ck = next(c for c in doc["checks"] if c["name"] == "checkpoint_write")
    assert ck["detail"] == "dcp; 25% of the storage ceiling"
    assert ck["status"] == PASS


# ---------------------------------------------------------------- job_completed: evidence only

# What torchrun printed in the run the issue reported (`rackform smoke --blueprint
# blueprints/aws-training.yaml --env dev`, no /mnt/checkpoints): rank 0 returned 1 because a
# check had failed, torchrun took that for a crash, sent rank 1 SIGTERM and exited 1.
CHECK_FAILED_EXIT = """\
W1124 12:17:43.945000 28201 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 28224 closing signal SIGTERM
E1124 12:17:44.042000 28201 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 28223) of binary: python
============================================================
validators.smoke FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-24_12:17:43
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 28223)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================""".splitlines()


def _job(doc) -> dict:
    return next(c for c in doc["checks"] if c["name"] == "job_completed")


def test_complete_flag_and_torchrun_exit_1_is_no_proof_of_completion():
    """The issue: the report said complete (rank 0 wrote it, alone, before the last barrier)
    and torchrun exited 1; that passed as 'ran to the end and a check failed'. torchrun exits
    1 for any failed rank, so it is no evidence that every rank got to the end."""
    old_style = report.make([compare("loss_drop", 0.5, 0.2, "fraction")], complete=True, pending=[])
    doc = launch.compose(None, old_style, launch.Proc(1, CHECK_FAILED_EXIT, False), 900)
    job = _job(doc)
    assert job["status"] == FAIL
    assert job["detail"] == "rank 0 on localhost failed: exit code 1"
    assert doc["complete"] is False
    # Even with the end marker, a rank that did not exit cleanly is no completed job.
    doc = launch.compose(None, _done([]), launch.Proc(1, KILLED, False), 900)
    job = _job(doc)
    assert job["status"] == FAIL
    assert job["detail"].startswith("rank 1 on localhost failed: exit code -9 (SIGKILL)")
    assert job["detail"].endswith(
        "(all 2 ranks reached the end of the job, then a rank did not exit cleanly)"
    )


def test_clean_exit_without_the_end_marker_fails_naming_where_it_stopped():
    partial = report.make(
        [compare("loss_drop", 0.5, 0.2, "fraction")],
        complete=False,
        pending=["checkpoint_roundtrip"],
        job={"world_size": 2},
        metrics={"phases_s": {"device checks": 0.1, "training": 1.0}},
    )
    job = _job(launch.compose(None, partial, launch.Proc(0, [], False), 900))
    assert job["status"] == FAIL
    assert job["detail"] == (
        "torchrun exited 0 but the report has no end marker: "
        "the job stopped during or after its 'training' phase"
    )
    none = _job(launch.compose(None, None, launch.Proc(0, [], False), 900))
    assert (
        none["status"] == FAIL and none["detail"] == "torchrun exited 0 but the job wrote no report"
    )


def test_end_marker_short_of_the_world_fails():
    doc = launch.compose(None, _done([], ranks=7, world=8), launch.Proc(0, [], False), 900)
    job = _job(doc)
    assert job["status"] == FAIL
    assert job["detail"] == "torchrun exited 0 but 7 of 8 ranks reached the end of the job"


def test_every_rank_at_the_end_and_a_clean_exit_pass():
    job = _job(launch.compose(None, _done([], ranks=8, world=8), launch.Proc(0, [], False), 900))
    assert job["status"] == PASS
    assert job["detail"] == "all 8 ranks reached the end of the job; torchrun exit 0"


def test_deadline_fails_even_with_the_end_marker():
    job = _job(launch.compose(None, _done([]), launch.Proc(-15, [], True), 60))
    assert job["status"] == FAIL and "60 s deadline" in job["detail"]


def test_a_job_that_never_started_fails_saying_why():
    doc = launch.compose(
        None, None, None, 900, not_started="numpy is not installed: pip install numpy"
    )
    job = _job(doc)
    assert job["status"] == FAIL and job["measured"] == "not started"
    assert job["detail"] == "not started: numpy is not installed: pip install numpy"


def test_the_job_runs_with_its_verdict_in_the_report():
    """Under the launcher a failed check must not show as a failed rank: torchrun would stop
    the other ranks and exit 1 exactly as for a crash."""
    cmd = launch.torchrun_cmd(2, [], ["--steps", "3"], "/tmp/r.json")
    assert "--verdict-in-report" in cmd and cmd[-2:] == ["--steps", "3"]


def test_omp_threads_set_for_the_job_unless_given(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert launch._env()["OMP_NUM_THREADS"] == "1"  # torchrun's own default, set silently
    monkeypatch.setenv("OMP_NUM_THREADS", "6")
    assert launch._env()["OMP_NUM_THREADS"] == "6"


# torchrun ordered the ranks by when it saw them fail: rank 0's lost-peer error, logged while
# torchrun was already stopping it (SIGTERM) after rank 1 was killed, came out as the root cause.
SIGTERMED_FIRST = """\
Failures:
[1]:
  time      : 2026-11-24_13:58:01
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-24_13:58:01
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 4241)
  error_file: /tmp/x/error.json
  traceback : Traceback (most recent call last):
    File "smoke.py", line 1, in <module>
  RuntimeError: [gloo] Connection closed by peer [127.0.0.1]:29500
============================================================
"""


def test_the_rank_torchrun_stopped_is_not_named_as_the_cause():
    text = launch.root_cause(SIGTERMED_FIRST.splitlines())
    assert text.startswith("rank 1 on localhost failed: exit code -9"), text


def test_a_sigterm_alone_is_still_named():
    only = SIGTERMED_FIRST[SIGTERMED_FIRST.index("Root Cause") :]
    assert launch.root_cause(only.splitlines()).startswith(
        "rank 0 on localhost failed: exit code -15"
    )


def test_a_job_run_by_slurm_names_its_job_and_allocation():
    slurm = {"job_id": "812", "nodelist": "node[1-2]", "nodes": 2, "node": "node1",
             "gpus_per_node": 0, "partition": "main", "job_name": "s", "restart_count": 0}  # fmt: skip
    doc = launch.compose(None, _done([]), launch.Proc(0, [], False), 900, slurm=slurm)
    assert doc["slurm"] == slurm
    assert "slurm" not in launch.compose(None, _done([]), launch.Proc(0, [], False), 900)


def _run_launcher(tmp_path, *args: str, timeout: float = 120):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "validators.launch", "--nproc", "1", "--json", str(out), *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )  # fmt: skip
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def test_a_failed_host_check_ends_a_gated_one_node_run_before_the_job(tmp_path):
    """--skip-job-on-host-failure: the mount check fails (no such directory), so the job is
    never started (no torch, no launch time for it), and the verdict fails, naming the check."""
    proc, doc = _run_launcher(
        tmp_path, "--skip-job-on-host-failure",
        f"--host-args=--node n1 --expect-mount {tmp_path / 'nowhere'}", "--", "--steps", "2",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    by = {c["name"]: c for c in doc["checks"]}
    assert by["checkpoint_mount"]["status"] == FAIL
    job = by["job_completed"]
    assert job["status"] == FAIL
    assert job["detail"] == "not started: the host checks failed (checkpoint_mount)"
    assert by["smoke_job_checks"]["status"] == NOT_RUN
    assert not doc["ok"] and "job" not in doc
    assert set(doc["launch_s"]) == {"host_checks"}
    assert "the job is not started" in proc.stderr


@pytest.mark.slow
def test_the_gate_lets_the_job_run_when_the_host_checks_pass(tmp_path):
    """The same gate with host checks that fail nothing (not-run is no failure): the job runs
    and its own checks decide, so the gate never turns a run into a pass or skips a good one."""
    port = free_port()  # for the job's store
    # One node, its worker started by the launcher (as the smoke_train role runs a one-node
    # re-validation: no torchrun agent importing torch first).
    proc, doc = _run_launcher(
        tmp_path, "--skip-job-on-host-failure", "--host-args=--node n1",
        "--node-rank", "0", "--nnodes", "1", "--master", f"127.0.0.1:{port}", "--",
        "--steps", "3", "--allreduce-max-mb", "0.25", "--checkpoint-dir", str(tmp_path / "ck"),
        timeout=300,
    )  # fmt: skip
    by = {c["name"]: c for c in doc["checks"]}
    assert by["job_completed"]["status"] == PASS, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "workers" in doc["launch_s"] and doc["job"]["world_size"] == 1


@pytest.mark.parametrize(
    "layout",
    [
        ["--node-rank", "0", "--nnodes", "2", "--master", "127.0.0.1:29500"],
        ["--torchrun=--nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=n1:29500"],
        ["--torchrun=--nnodes 1:4 --rdzv-backend=c10d --rdzv-endpoint=n1:29500"],
    ],
)
def test_the_gate_is_refused_for_a_job_over_several_nodes(tmp_path, layout):
    """A node of a larger job that skipped its part would leave the others waiting at the
    rendezvous until their timeout: refused before anything runs."""
    proc, doc = _run_launcher(tmp_path, "--skip-job-on-host-failure", *layout, "--")
    assert proc.returncode == 2 and doc is None
    assert "--skip-job-on-host-failure is for a job on one node only" in proc.stderr


@pytest.mark.parametrize(
    ("layout", "torchrun", "one"),
    [
        (None, [], True),  # torchrun --standalone
        (None, ["--nnodes=1", "--rdzv-endpoint=n1:1"], True),
        (None, ["--nnodes", "1"], True),
        (None, ["--nnodes=2"], False),
        (None, ["--nnodes", "1:2"], False),
        (launch.Layout(0, 1, "n1", 29500), [], True),
        (launch.Layout(1, 3, "n1", 29500), [], False),
    ],
)
def test_one_node_reads_the_layout_and_torchruns_nnodes(layout, torchrun, one):
    assert launch.one_node(layout, torchrun) is one
