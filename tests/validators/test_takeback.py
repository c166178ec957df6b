"""The take-back rule (validators/takeback.py) and the job's side of it (validators/elastic.py,
`requeue_when_back`): take the lost nodes back only where the nodes are there and the time left
times the share lost exceeds the restart. Slurm's answers come through `run`, the seam the job
calls Slurm by, in the formats its manual pages give (Slurm 22.05: scontrol(1) `show hostnames`
one name a line; sinfo(1) `--Node --format=%N|%T` one node a line, the state's long name with
`*` for a node not responding; squeue(1) `%L`, [days-]hours:minutes:seconds, minutes:seconds,
"UNLIMITED" or "NOT_SET"). The real Slurm run is tests/validators/test_elastic_slurm.py."""

from __future__ import annotations

import math
import subprocess

import pytest

from validators import elastic, failure_costs
from validators.takeback import BAD, FULL, MISSING, PAYS, SHORT, UNKNOWN, decide

DAY, HOUR = 86400.0, 3600.0


def test_a_job_near_its_end_never_takes_back():
    # Half its nodes lost, all back, ten minutes left: 600 x 2/4 = 300 s, not over 300 + 120.
    d = decide(4, 2, 2, 600.0, 300.0, 120.0)
    assert (d.take, d.kind) == (False, SHORT) and d.gain_s == 300.0 and d.cost_s == 420.0
    assert not decide(4, 2, 2, 0.0, 0.0).take  # nothing left: 0 > 0 is no gain


def test_a_small_job_with_a_day_left_takes_back():
    d = decide(4, 3, 1, DAY, 300.0, 120.0)
    assert (d.take, d.kind) == (True, PAYS) and d.gain_s == DAY / 4
    assert "take back" in d.why and "21600 s" in d.why


def test_a_512_node_job_with_an_hour_left_goes_on_short():
    # One node of 512 for an hour is 7 s of the whole job; a restart is 5 minutes.
    d = decide(512, 511, 1, HOUR, 300.0)
    assert (d.take, d.kind) == (False, SHORT) and d.gain_s == pytest.approx(7.03, abs=0.01)
    # The break-even: 300 x 512 s (about 42.7 h) left, and just over it.
    assert not decide(512, 511, 1, 300.0 * 512, 300.0).take
    assert decide(512, 511, 1, 300.0 * 512 + 1, 300.0).take


def test_without_the_nodes_there_is_nothing_to_take_back():
    # Lost nodes not idle and no spare: no, however long the job has.
    assert decide(8, 6, 0, math.inf, 0.0).kind == MISSING
    assert decide(8, 6, 1, 30 * DAY, 0.0).kind == MISSING  # one of two is not enough
    assert decide(8, 8, 3, DAY, 300.0).kind == FULL


def test_unknown_time_left_holds_back_and_no_limit_takes_back():
    assert decide(4, 3, 1, None, 300.0).kind == UNKNOWN
    d = decide(512, 511, 1, math.inf, 300.0, 120.0)
    assert (
        d.take
        and d.as_dict()["remaining_s"] == "unlimited"
        and d.as_dict()["gain_s"] == "unlimited"
    )


@pytest.mark.parametrize(
    "args",
    [
        (4, 5, 1, DAY, 300.0),  # more running than the job has
        (4, -1, 1, DAY, 300.0),
        (4, 3, True, DAY, 300.0),  # a flag is no count
        (4, 3, "1", DAY, 300.0),
        (4, 3, 1, -5.0, 300.0),
        (4, 3, 1, math.nan, 300.0),
        (4, 3, 1, DAY, math.nan),
        (4, 3, 1, DAY, math.inf),  # a restart that never ends
        (4, 3, 1, DAY, 300.0, -120.0),
        (4.0, 3, 1, DAY, 300.0),
    ],
)
def test_malformed_values_never_take_back(args):
    d = decide(*args)
    assert (d.take, d.kind) == (False, BAD) and "malformed" in d.why


# -- the job's side: Slurm's answers through the `run` seam ---------------------------------


class Slurm:
    """Answers the commands requeue_when_back runs, and records them."""

    def __init__(self, hostnames="a-0\na-1\na-2\na-3\n", sinfo="", left="1-00:00:00\n", fail=None):
        self.out = {
            "scontrol show": hostnames,
            "sinfo": sinfo,
            "squeue": left,
            "scontrol requeue": "",
        }
        self.fail, self.calls = fail, []

    def __call__(self, argv: list[str]) -> str:
        self.calls.append(argv)
        key = argv[0] if argv[0] != "scontrol" else " ".join(argv[:2])
        if key == self.fail:
            raise subprocess.CalledProcessError(1, argv, "", "slurm_load_jobs error")
        return self.out[key]

    @property
    def requeued(self) -> bool:
        return any(a[:2] == ["scontrol", "requeue"] for a in self.calls)


ENV = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "a-[0-3]", "SLURM_JOB_NUM_NODES": "4",
       "SLURM_JOB_PARTITION": "gpu"}  # fmt: skip
RUNNING = {"a-0", "a-1", "a-2"}


def ask(slurm: Slurm, env=ENV, running=RUNNING, **kw):
    return elastic.requeue_when_back(running, env, slurm, **kw)


def test_the_lost_node_idle_with_a_day_left_requeues_the_job():
    s = Slurm(sinfo="a-0|mixed\na-1|allocated\na-2|allocated\na-3|idle\nb-0|allocated\n")
    d = ask(s, restart_s=300.0, requeue_delay_s=120.0)
    assert d.take and d.remaining_s == DAY and d.cost_s == 420.0
    assert d.why.startswith("nodes a-3 are back: job 4242 requeued to resume at full size")
    # Every value reaches Slurm as NAME=VALUE or after its command's own words, never as an option.
    assert s.calls == [
        ["scontrol", "show", "hostnames", "a-[0-3]"],
        ["sinfo", "--noheader", "--Node", "--format=%N|%T", "--partition=gpu"],
        ["squeue", "--noheader", "--jobs=4242", "--format=%L"],
        ["scontrol", "requeue", "4242"],
    ]


def test_an_idle_spare_in_the_partition_stands_in_for_the_lost_node():
    s = Slurm(sinfo="a-0|mixed\na-1|mixed\na-2|mixed\na-3|down*\nspare-9|idle\n")
    d = ask(s)
    assert d.take and s.requeued
    assert d.why.startswith("1 nodes idle in partition gpu: job 4242 requeued")


def test_the_lost_node_down_and_no_spare_asks_no_more():
    s = Slurm(sinfo="a-0|mixed\na-1|mixed\na-2|mixed\na-3|down*\nb-0|drained\nb-1|idle~\n")
    d = ask(s)
    assert d.kind == MISSING and not s.requeued
    assert [c[0] for c in s.calls] == ["scontrol", "sinfo"]  # squeue not asked


@pytest.mark.parametrize(
    ("left", "take", "kind"),
    [
        ("10:00", False, SHORT),  # ten minutes left of a 4-node job: 150 s < 420 s
        ("1:00:00", True, PAYS),  # an hour: 900 s
        ("UNLIMITED", True, PAYS),
        ("NOT_SET", False, UNKNOWN),
    ],
)
def test_the_time_left_decides(left, take, kind):
    s = Slurm(sinfo="a-3|idle\n", left=left + "\n")
    d = ask(s, requeue_delay_s=120.0)
    assert (d.take, d.kind, s.requeued) == (take, kind, take)


def test_without_a_partition_only_the_lost_nodes_count():
    env = {k: v for k, v in ENV.items() if k != "SLURM_JOB_PARTITION"}
    s = Slurm(sinfo="a-3|idle\n")
    assert ask(s, env).take
    assert s.calls[1][-1] == "--nodes=a-3"
    # A partition name that could be read as an option is not passed: the lost nodes are asked.
    s = Slurm(sinfo="a-3|idle\n")
    assert ask(s, {**ENV, "SLURM_JOB_PARTITION": "--all"}).take and s.calls[1][-1] == "--nodes=a-3"


@pytest.mark.parametrize(
    ("slurm", "env"),
    [
        (Slurm(sinfo="a-3 idle\n"), ENV),  # not the format asked for
        (Slurm(sinfo="a-3|IDLE!!\n"), ENV),
        (Slurm(sinfo="--nodes=x|idle\n"), ENV),
        (Slurm(sinfo="a-3|idle\n", left="soon\n"), ENV),
        (Slurm(sinfo="a-3|idle\n", left="-5:00\n"), ENV),
        (Slurm(sinfo="a-3|idle\n", left="3-12\n"), ENV),
        (Slurm(sinfo="a-3|idle\n", left="INVALID\n"), ENV),
        (Slurm(hostnames="a-0\na-1\na-2\n-rf\n", sinfo="a-3|idle\n"), ENV),
        (Slurm(sinfo="a-3|idle\n"), {**ENV, "SLURM_JOB_ID": "42;reboot"}),
        (Slurm(sinfo="a-3|idle\n"), {**ENV, "SLURM_JOB_NODELIST": "--help"}),
    ],
)
def test_malformed_answers_from_slurm_never_requeue_and_never_crash(slurm, env):
    d = ask(slurm, env)
    assert (d.take, d.kind, slurm.requeued) == (False, BAD, False), d


@pytest.mark.parametrize("fail", ["sinfo", "squeue", "scontrol show"])
def test_slurm_silent_asks_again_later(fail):
    d = ask(Slurm(sinfo="a-3|idle\n", fail=fail))
    assert (d.take, d.kind) == (False, elastic.SILENT)


def test_nothing_to_decide_outside_slurm_or_at_full_size():
    assert ask(Slurm(), {}) is None
    assert ask(Slurm(), running={"a-0", "a-1", "a-2", "a-3"}) is None


def test_time_left_reads_squeues_formats():
    assert elastic.time_left("2-03:04:05") == ((2 * 24 + 3) * 60 + 4) * 60 + 5
    assert elastic.time_left("03:04:05") == (3 * 60 + 4) * 60 + 5
    assert elastic.time_left("4:05") == 4 * 60 + 5
    assert elastic.time_left("UNLIMITED") == math.inf and elastic.time_left("NOT_SET") is None


# -- what the job records ------------------------------------------------------------------


def test_the_restart_is_costed_from_the_jobs_own_records():
    delay = elastic.REQUEUE_DELAY_S
    assert failure_costs.restart_cost({}, 300.0, delay) == (300.0, delay)
    # A failure's time to continue was an agents' restart in place: the requeue delay on top.
    failed = {"failures": [{"continue_s": 40.0}, {"continue_s": 55.5}]}
    assert failure_costs.restart_cost(failed, 300.0, delay) == (55.5, delay)
    # A node taken back measured a requeue whole, its delay included.
    back = {**failed, "rejoins": [{"continue_s": 170.0}]}
    assert failure_costs.restart_cost(back, 300.0, delay) == (170.0, 0.0)
    assert failure_costs.restart_cost({"failures": [{"continue_s": None}]}, 300.0, 0.0) == (
        300.0,
        0.0,
    )


def test_the_job_records_each_change_of_answer_once():
    progress: dict = {}
    short = decide(4, 3, 1, 600.0, 300.0).as_dict()
    missing = decide(4, 3, 0, None, 300.0).as_dict()
    said = [failure_costs.take_back_record(progress, d, step, float(step))
            for step, d in enumerate([missing, missing, short, short, None, short])]  # fmt: skip
    assert said == [True, False, True, False, False, False]
    assert [(r["step"], r["kind"]) for r in progress["take_backs"]] == [(0, MISSING), (2, SHORT)]
    assert (
        progress["take_backs"][1]["gain_s"] == 150.0
        and progress["take_backs"][1]["cost_s"] == 300.0
    )
    # Another node lost: the same answer with fewer nodes running is a change.
    assert failure_costs.take_back_record(progress, decide(4, 2, 0, None, 300.0).as_dict(), 9, 9.0)
    # A take-back is always recorded.
    took = decide(4, 3, 1, DAY, 300.0).as_dict()
    assert failure_costs.take_back_record(progress, took, 10, 10.0)
    assert failure_costs.take_back_record(progress, took, 11, 11.0)
