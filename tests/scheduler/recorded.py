"""Job records as Slurm writes them, for the parser and usage tests.

The jobcomp line follows JOB_FORMAT in Slurm's src/plugins/jobcomp/filetxt/jobcomp_filetxt.c
(the same in 22.05 and today: the fields, their order, `%FT%T` local times or `Unknown`,
ArrayJobId/ArrayTaskId and HetJobId/HetJobOffset only for such jobs, the trailing space), with a
name that holds a space and a `JobState=`, and `gres/gpu` in its TRES as a Slurm with slurmdbd
writes it. The sacct lines are `sacct --parsable2 --noheader --format=JobID,User,Account,
Partition,State,Start,End,ElapsedRaw,AllocTRES,NodeList` as its manual describes it (with the
header line sacct prints without --noheader): `|`-separated, no trailing `|`, a line per step
after its job, AllocTRES with the typed GPU count next to the total, `CANCELLED by UID`, `Unknown`
end while running, `None assigned` nodes for a job that never ran.
"""

from __future__ import annotations

JOBCOMP = (
    "JobId=3 UserId=alice(1001) GroupId=ml(2000) Name=pretrain 13b JobState=x JobState=COMPLETED "
    "Partition=batch-gpu TimeLimit=UNLIMITED StartTime=2026-11-25T10:00:00 "
    "EndTime=2026-11-25T12:30:00 NodeList=hgx-0[1-2] NodeCnt=2 ProcCnt=32 "
    "WorkDir=/home/alice/my runs ReservationName= Tres=cpu=32,mem=1000M,node=2,billing=32,"
    "gres/gpu=16 Account=ml QOS=normal WcKey= Cluster=dc2 SubmitTime=2026-11-25T09:59:00 "
    "EligibleTime=2026-11-25T09:59:00 ArrayJobId=3 ArrayTaskId=0 DerivedExitCode=0:0 "
    "ExitCode=0:0 \n"
)
SACCT = """\
JobID|User|Account|Partition|State|Start|End|ElapsedRaw|AllocTRES|NodeList
41|alice|ml|batch|COMPLETED|2026-11-25T10:00:00|2026-11-25T12:00:00|7200|billing=16,cpu=16,gres/gpu:h100_sxm=16,gres/gpu=16,mem=64G,node=2|hgx-0[1-2]
41.batch||ml||COMPLETED|2026-11-25T10:00:00|2026-11-25T12:00:00|7200|cpu=8,gres/gpu:h100_sxm=8,gres/gpu=8,mem=32G,node=1|hgx-01
41.extern||ml||COMPLETED|2026-11-25T10:00:00|2026-11-25T12:00:00|7200|billing=16,cpu=16,gres/gpu=16,mem=64G,node=2|hgx-0[1-2]
42|bob|research|scavenger|RUNNING|2026-11-25T11:30:00|Unknown|1800|billing=8,cpu=8,gres/gpu=8,mem=32G,node=1|hgx-03
43|carol|ml|batch|CANCELLED by 1001|None|2026-11-25T11:00:00|0||None assigned
"""
