"""What squeue's lines mean for reap's busy check, on lines that try to fool it. The line format
is rackform's own (`--format='%i|%T|%u|%a|%P|%N|%r'`); the lines below have the shapes the local
Slurm prints for it (test_queue_slurm.py reads the same from a real slurmctld), and the states
those a test cannot hold a real job in for long (COMPLETING, CONFIGURING, STAGE_OUT, ...)."""

from __future__ import annotations

import pytest

from rackform.scheduler.queue import SQUEUE, Job, QueueError, active, parse


def one(state: str, nodes: str = "slurm-a-[0-1]", reason: str = "None") -> Job:
    [job] = parse(f"17|{state}|alice|ml|batch-gpu|{nodes}|{reason}\n")
    return job


@pytest.mark.parametrize(
    "state",
    [
        "RUNNING", "PENDING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED",
        "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT", "STAGE_OUT", "SIGNALING", "RESIZING",
        "STOPPED", "RESV_DEL_HOLD", "POWER_UP_NODE",
        "FROBNICATING",  # a state a later Slurm may add: it keeps the cluster, never reaps it
    ],
)  # fmt: skip
def test_every_state_but_an_end_state_is_a_job_in_the_queue(state):
    assert one(state).active


@pytest.mark.parametrize(
    "state",
    ["COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
     "DEADLINE", "OUT_OF_MEMORY", "REVOKED"],
)  # fmt: skip
def test_a_finished_job_squeue_still_shows_is_not(state):
    assert not one(state).active


def test_padding_blank_lines_and_hyphens_are_read_as_they_are():
    text = (
        "\n"
        "  12 | RUNNING |alice|ml-team| batch-gpu-h100 |slurm-a-[0-1]|None  \n"
        "   \n"
        "13_[1-4%2]|PENDING|bob|(null)|scav-low,batch-gpu||Priority\n"
        "14+0|COMPLETED|carol|ml|batch-gpu|slurm-a-0|None\n"
    )
    jobs = parse(text)
    assert [j.id for j in jobs] == ["12", "13_[1-4%2]", "14+0"]
    assert jobs[0].partition == "batch-gpu-h100" and jobs[0].account == "ml-team"
    assert jobs[1].partition == "scav-low,batch-gpu" and jobs[1].reason == "Priority"
    assert [j.id for j in active(jobs)] == ["12", "13_[1-4%2]"]


@pytest.mark.parametrize(
    "text",
    [
        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n",
        "JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n",  # the default format
        "12|RUNNING|alice|ml|batch\n",  # cut short
        "twelve|RUNNING|alice|ml|batch|n1|None\n",
        "12|running|alice|ml|batch|n1|None\n",
        # A job id heal and rolling changes give back to `scontrol requeue`: never an option
        # or shell code (it is quoted on the way too: tests/scheduler/test_remote.py).
        "-oProxyCommand=x|RUNNING|alice|ml|batch|n1|None\n",
        "12;reboot|RUNNING|alice|ml|batch|n1|None\n",
    ],
)
def test_a_line_that_is_not_a_job_makes_the_queue_unreadable_not_emptier(text):
    ok = "11|RUNNING|alice|ml|batch|n1|None\n"
    with pytest.raises(QueueError, match="line 2 is not a job"):
        parse(ok + text)


def test_an_empty_queue_is_empty():
    assert parse("") == [] and parse("\n  \n") == []


def test_the_report_names_the_job_its_user_partition_state_and_foreign_nodes():
    listed = ["slurm-a-0", "slurm-a-1"]
    assert one("RUNNING").describe(listed) == (
        "job 17 (alice, account ml, partition batch-gpu): RUNNING on slurm-a-[0-1]"
    )
    pending = one("PENDING", nodes="", reason="JobHeldUser")
    assert pending.describe(listed) == (
        "job 17 (alice, account ml, partition batch-gpu): PENDING (JobHeldUser)"
    )
    # Another cluster's nodes in this controller's queue: counted, and named as not ours.
    other = one("RUNNING", nodes="gpu-b[1-2],slurm-a-1")
    assert other.describe(listed).endswith("(not the blueprint's: gpu-b1,gpu-b2)")


def test_squeue_is_asked_for_every_state_and_every_partition():
    # Hidden partitions and partitions the ssh user cannot use are shown only with --all;
    # states are judged here, so a state squeue's default list leaves out is still seen.
    assert "--all" in SQUEUE and "--states=all" in SQUEUE
