"""Slurm's job records parsed, on the recorded lines of recorded.py (where they come from is said
there); test_jobs_cmd.py reads lines a real slurmctld wrote."""

from __future__ import annotations

from datetime import datetime

import pytest
from recorded import JOBCOMP, SACCT

from rackform.scheduler.records import RecordError, gpus, parse


def test_a_jobcomp_record_with_spaces_in_its_name_and_work_dir():
    [r] = parse(JOBCOMP, "jobcomp.log")
    # The name holds a space and even a `JobState=`: the fields after it still parse.
    assert (r.id, r.user, r.account, r.partition, r.state) == (
        "3",
        "alice",
        "ml",
        "batch-gpu",
        "COMPLETED",
    )
    assert r.start == datetime(2026, 11, 25, 10) and r.end == datetime(2026, 11, 25, 12, 30)
    assert (r.gpus, r.nodes, r.running) == (16, "hgx-0[1-2]", False)
    assert r.seconds(datetime(2030, 1, 1)) == 2.5 * 3600


def test_missing_fields_are_missing_not_an_error():
    # An older Slurm wrote no Tres, WcKey, Cluster, SubmitTime or EligibleTime.
    line = (
        "JobId=7 UserId=bob(1002) GroupId=bob(1002) Name=eval JobState=TIMEOUT Partition=b "
        "TimeLimit=60 StartTime=2026-11-25T10:00:00 EndTime=2026-11-25T11:00:00 NodeList=n1 "
        "NodeCnt=1 ProcCnt=1 WorkDir=/tmp ReservationName= Account= QOS=normal"
    )
    [r] = parse(line, "old.log")
    assert (r.id, r.state, r.account, r.gpus) == ("7", "TIMEOUT", "", None)


def test_a_job_cancelled_while_pending_never_ran():
    line = JOBCOMP.replace("StartTime=2026-11-25T10:00:00", "StartTime=Unknown")
    [r] = parse(line, "x")
    assert r.start is None and r.seconds(datetime(2030, 1, 1)) == 0


def test_sacct_jobs_without_their_steps_a_running_one_counted_to_now():
    jobs = {r.id: r for r in parse(SACCT, "sacct.txt")}
    assert list(jobs) == ["41", "42", "43"]  # the header and the steps left out
    assert jobs["41"].gpus == 16  # the total, not the total plus its typed breakdown
    assert jobs["41"].seconds(datetime(2030, 1, 1)) == 7200
    running = jobs["42"]
    assert running.running and running.end is None and running.seconds(datetime(2030, 1, 1)) == 1800
    cancelled = jobs["43"]
    assert (cancelled.state, cancelled.start, cancelled.gpus) == ("CANCELLED", None, None)


@pytest.mark.parametrize(
    ("tres", "n"),
    [
        ("cpu=2,mem=1000M,node=2,billing=2,gres/gpu=16", 16),
        ("cpu=2,gres/gpu:h100_sxm=8,gres/gpu=8", 8),
        ("cpu=2,gres/gpu:a100=2,gres/gpu:h100=4", 6),
        ("cpu=2,gres/gpumem=4000,node=1", None),  # not a GPU count
        ("cpu=2,mem=1000M,node=1,billing=1", None),
        ("", None),
    ],
)
def test_gpus_of_a_tres_string(tres, n):
    assert gpus(tres) == n


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[2026-11-25T10:00:00] slurmctld started\n", "x.log:2: neither a jobcomp"),
        (JOBCOMP.split(" EndTime")[0], "x.log:2: no EndTime= (a record cut short"),
        # Cut inside a key: JobState= and StartTime= are there, only EndTime= is missing (the
        # name's lazy match swallowed them once, and the error named all three).
        (JOBCOMP.split(" EndTime")[0] + " EndTi", "x.log:2: no EndTime= (a record cut short"),
        (JOBCOMP.split(" StartTime")[0] + " Sta", "x.log:2: no StartTime=, EndTime= (a record"),
        (JOBCOMP.split(" Account")[0] + " Acc", "x.log:2: a record cut short: it ends in 'Acc'"),
        (JOBCOMP.replace("EndTime=2026-11-25T12:30:00", "EndTime=25/11/2026"),
         "x.log:2: EndTime '25/11/2026' is not a time"),
        ("44|dave|ops|batch|COMPLETED|2026-11-25T09:00:00\n", "x.log:2: 6 '|'-separated fields"),
        ("44|d|o|b|COMPLETED|2026-11-25T09:00:00|2026-11-25T10:00:00|1h||n1\n",
         "x.log:2: ElapsedRaw '1h' is not a number"),
    ],
)  # fmt: skip
def test_a_line_that_is_no_record_is_located(text, error):
    with pytest.raises(RecordError) as exc:
        list(parse("\n" + text, "x.log"))
    assert str(exc.value).startswith(error), exc.value
