"""GPU-hours and cost per job and per account, on values: GPUs from the records where Slurm
tracks them, from the blueprint's nodes where it does not (and said so), running jobs to now,
jobs without GPUs at zero, --since."""

from __future__ import annotations

from datetime import datetime

import pytest
from recorded import JOBCOMP, SACCT

from rackform.scheduler.records import parse
from rackform.scheduler.usage import usage

NODES = {"hgx-01": 8, "hgx-02": 8, "hgx-03": 8, "hgx-04": 8}
NOW = datetime(2026, 11, 25, 12, 0)
PRICE = 2.0  # USD per GPU-hour


def test_tracked_gpus_per_job_and_account():
    u = usage(parse(SACCT, "s"), NODES, PRICE, NOW)
    jobs = {j.job.id: j for j in u.jobs}
    assert jobs["41"].gpu_hours == 32.0 and jobs["41"].usd == 64.0
    assert jobs["42"].gpu_hours == 4.0 and jobs["42"].gpus_from == "tres"  # 8 GPUs, 30 min so far
    # Cancelled before it ran, no GPU in its TRES: nothing.
    assert (jobs["43"].gpus, jobs["43"].gpu_hours, jobs["43"].gpus_from) == (0, 0.0, "none")
    assert [(a.account, a.jobs, a.gpu_hours, a.usd) for a in u.accounts] == [
        ("ml", 2, 32.0, 64.0),
        ("research", 1, 4.0, 8.0),
    ]
    assert (u.gpu_hours, u.usd) == (36.0, 72.0)
    assert "1 jobs still running: counted to now" in u.notes


def test_where_gpus_are_tracked_a_job_whose_tres_names_none_used_none():
    cpu_job = "44|dave|ops|batch|COMPLETED|2026-11-25T09:00:00|2026-11-25T10:00:00|3600|cpu=4,node=1|hgx-04"
    u = usage(parse(SACCT + cpu_job, "s"), NODES, PRICE, NOW)
    assert [(j.gpus, j.gpus_from) for j in u.jobs if j.job.id == "44"] == [(0, "none")]


def test_untracked_gpus_charge_every_gpu_of_the_job_s_nodes_and_say_so():
    # The slurm role's cluster: no slurmdbd, so no gres/gpu in any record.
    log = JOBCOMP.replace(",gres/gpu=16", "")
    [j] = usage(parse(log, "l"), NODES, PRICE, NOW).jobs
    assert (j.gpus, j.gpus_from, j.gpu_hours, j.usd) == (16, "nodes", 40.0, 80.0)
    u = usage(parse(log, "l"), NODES, PRICE, NOW)
    assert any("an upper bound where jobs share a node" in n for n in u.notes)


def test_nodes_the_blueprint_does_not_list_count_no_gpus_and_are_named():
    log = JOBCOMP.replace(",gres/gpu=16", "").replace(
        "NodeList=hgx-0[1-2]", "NodeList=gpu-b1,hgx-01"
    )
    u = usage(parse(log, "l"), NODES, PRICE, NOW)
    assert u.jobs[0].gpus == 8
    assert "nodes not in the blueprint count no GPUs: gpu-b1" in u.notes


def test_no_price_gives_gpu_hours_without_usd():
    u = usage(parse(JOBCOMP, "l"), NODES, None, NOW)
    assert u.jobs[0].usd is None and u.usd is None and u.accounts[0].usd is None
    assert u.gpu_hours == 40.0
    assert "the catalog has no price for this cluster: no USD" in u.notes


@pytest.mark.parametrize(
    ("since", "ids"),
    [
        (datetime(2026, 11, 25, 11, 0), ["41", "42", "43"]),  # 43 ended at 11:00 exactly
        (datetime(2026, 11, 25, 11, 1), ["41", "42"]),
        (datetime(2026, 11, 26), ["42"]),  # still running: always counted
    ],
)
def test_since_keeps_jobs_that_ended_at_or_after_it_and_running_ones(since, ids):
    assert [j.job.id for j in usage(parse(SACCT, "s"), NODES, PRICE, NOW, since).jobs] == ids


# A scavenger job preempted and requeued, as `sacct --duplicates` lists it: one record per run
# under one job id, the first run's state REQUEUED, the second still running.
REQUEUED = """\
45|erin|research|scav-low|REQUEUED|2026-11-25T08:00:00|2026-11-25T09:00:00|3600|billing=8,cpu=8,gres/gpu=8,node=1|hgx-03
45|erin|research|scav-low|COMPLETED|2026-11-25T09:30:00|2026-11-25T11:30:00|7200|billing=8,cpu=8,gres/gpu=8,node=1|hgx-04
"""


def test_a_requeued_job_is_one_job_charged_for_every_run():
    u = usage(parse(SACCT + REQUEUED, "s"), NODES, PRICE, NOW)
    [j] = [j for j in u.jobs if j.job.id == "45"]
    assert (j.times_run, j.hours, j.gpu_hours, j.usd) == (2, 3.0, 24.0, 48.0)
    assert (j.job.state, j.job.nodes) == ("COMPLETED", "hgx-04")  # its last run's
    d = j.as_dict()
    assert (d["runs"], d["run_states"], d["start"]) == (
        2, ["REQUEUED", "COMPLETED"], "2026-11-25T08:00:00"
    )  # fmt: skip
    assert [(a.account, a.jobs, a.gpu_hours) for a in u.accounts][1] == ("research", 2, 28.0)
    assert u.gpu_hours == 32.0 + 4.0 + 24.0
    assert "1 jobs ran more than once (preempted or requeued): each is charged for every run" in (
        u.notes
    )
