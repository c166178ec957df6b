"""The queue read from a real slurmctld (tests/slurm_local.py: Debian's Slurm on loopback): a
running job, a pending one, a suspended one, one requeued and held, none, and slurmctld down."""

from __future__ import annotations

import pytest
from slurm_local import NODES, PARTITIONS

from rackform.scheduler import queue
from rackform.scheduler.queue import QueueError

pytestmark = pytest.mark.usefixtures("slurm")


def read(slurm) -> list[queue.Job]:
    return queue.active(queue.read(slurm.runner))


def test_an_empty_queue_is_empty(slurm):
    assert read(slurm) == []


def test_a_running_job_is_named_with_its_nodes(slurm):
    job = slurm.sbatch("-N2", "--exclusive", "-A", "ml", "--wrap", "sleep 120")
    slurm.wait_state(job, "RUNNING")
    [got] = read(slurm)
    assert (got.id, got.state, got.account, got.partition) == (job, "RUNNING", "ml", PARTITIONS[0])
    assert got.node_names() == list(NODES)


def test_a_pending_job_alone_is_a_job(slurm):
    # Held: pending for as long as the test needs, whatever the scheduler does meanwhile.
    job = slurm.sbatch("--hold", "-p", PARTITIONS[1], "--wrap", "true")
    [got] = read(slurm)
    assert (got.id, got.state, got.partition, got.nodes) == (job, "PENDING", PARTITIONS[1], "")
    assert got.reason == "JobHeldUser"


def test_a_suspended_job_is_a_job(slurm):
    job = slurm.sbatch("--wrap", "sleep 120")
    slurm.wait_state(job, "RUNNING")
    slurm.run("scontrol", "suspend", job)
    slurm.wait_state(job, "SUSPENDED")
    assert [(j.id, j.state) for j in read(slurm)] == [(job, "SUSPENDED")]


def test_a_requeued_and_held_job_is_a_job_at_every_step(slurm):
    job = slurm.sbatch("--requeue", "--wrap", "sleep 120")
    slurm.wait_state(job, "RUNNING")
    slurm.run("scontrol", "requeuehold", job)
    seen: list[str] = []  # COMPLETING while its processes end, then held in the queue

    def settled() -> bool:
        jobs = read(slurm)
        seen.extend(j.state for j in jobs)
        assert [j.id for j in jobs] == [job], jobs  # a job at every read, never none
        return jobs[0].state not in ("RUNNING", "COMPLETING")

    assert slurm.wait(settled, 30, 0.05), seen
    assert seen[-1] in ("REQUEUE_HOLD", "PENDING", "REQUEUED"), seen


def test_a_finished_job_squeue_still_shows_is_not_a_job(slurm):
    job = slurm.sbatch("--wrap", "true")
    slurm.wait(lambda: slurm.state(job) == "COMPLETED", 30, 0.05)  # MinJobAge keeps it 2 s
    assert read(slurm) == []


def test_slurmctld_down_is_a_queue_error_not_an_empty_queue(slurm):
    with slurm.controller_down(), pytest.raises(QueueError) as exc:
        queue.read(slurm.runner)
    assert "squeue failed on this machine" in str(exc.value)
    assert "Unable to contact slurm controller" in str(exc.value)
