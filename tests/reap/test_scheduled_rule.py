"""reap's scheduler rule in process (rackform.reap.run.consider), on verdicts made from values
and the queue of the real local Slurm (tests/slurm_local.py) through the World's seam: which
verdicts the queue can change, and which never cause it to be read."""

from __future__ import annotations

import pytest
from slurm_local import NODES, blueprint

from rackform.engine import prepare
from rackform.reap.idleness import GpuStats
from rackform.reap.notify import Notifier
from rackform.reap.run import World, consider
from rackform.reap.verdict import decide, protected
from rackform.scheduler import queue
from rackform.targets.onprem.reap import OnPremReaper

AT = 1_800_000_000.0
SAMPLES = 60


def stats(peak: float, fb: float = 0.0) -> list[GpuStats]:
    return [
        GpuStats(n, str(g), peak=peak, sum=peak * SAMPLES, samples=SAMPLES, fb_min=fb, fb_max=fb,
                 expected=SAMPLES, short=0, before=SAMPLES)
        for n in NODES
        for g in range(2)
    ]  # fmt: skip


@pytest.fixture
def judge(slurm, tmp_path):
    reads: list[str] = []

    def read(plan):
        reads.append(plan.name)
        return queue.read(slurm.runner)

    world = World(
        tmp_path / "state",
        Notifier(None, None),
        prom=None,  # type: ignore[arg-type]  (no window is measured again here: no grace)
        reapers=lambda target: OnPremReaper(controller=lambda plan: slurm.runner),
        queue=read,
        now=lambda: AT,
    )

    def run(text: str, series: list[GpuStats]):
        f = tmp_path / "bp.yaml"
        f.write_text(text)
        p = prepare(f)
        d = decide(p.plan, series, None, str(f), AT)
        protected(d, p.plan)
        consider(d, p, world)
        return d

    run.reads = reads
    return run


STALLED_ACTS = blueprint().replace("grace_minutes: 0}", "grace_minutes: 0, stalled: act}")
REPORT_ONLY = blueprint().split("  idle:")[0]


@pytest.mark.parametrize(
    ("text", "series", "measured"),
    [
        (blueprint(), stats(2.0), "idle"),
        (STALLED_ACTS, stats(0.0, fb=40000), "stalled"),  # a hung job: Slurm's to end, not reap's
        (REPORT_ONLY, stats(2.0), "idle"),  # no lifecycle.idle: reported busy all the same
    ],
)
def test_a_job_in_the_queue_makes_idle_or_stalled_busy(judge, slurm, text, series, measured):
    job = slurm.sbatch("--hold", "--wrap", "true")
    d = judge(text, series)
    assert (d.measured, d.verdict, d.action, d.step) == (measured, "busy", None, None)
    assert [j["id"] for j in d.jobs] == [job] and judge.reads == ["slurm-a"]


def test_an_empty_queue_changes_nothing(judge):
    d = judge(blueprint(), stats(2.0))
    assert (d.verdict, d.action, d.step) == ("idle", "drain", "act")
    assert d.reasons[-1] == "Slurm: no job running or pending"


@pytest.mark.parametrize(
    ("text", "series", "verdict"),
    [
        (blueprint(), stats(90.0), "busy"),  # the metrics already keep it
        (blueprint(protect=True), stats(2.0), "protected"),
    ],
)
def test_the_queue_is_not_read_where_it_cannot_change_the_verdict(judge, text, series, verdict):
    d = judge(text, series)
    assert d.verdict == verdict and judge.reads == []


def test_a_cluster_drained_already_is_off_before_the_queue_is_read(judge, slurm):
    slurm.run("scontrol", "update", f"nodename={','.join(NODES)}", "state=drain", "reason=t")
    d = judge(blueprint(), stats(2.0))
    assert d.verdict == "off" and judge.reads == []
