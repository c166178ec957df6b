"""The verdict rules on values (no servers): what the end-to-end tests cannot reach cheaply."""

from __future__ import annotations

from clusters import bare_metal

from rackform.engine import prepare
from rackform.reap.measure import GpuSeries
from rackform.reap.verdict import decide


def plan(tmp_path, **kw):
    f = tmp_path / "bp.yaml"
    f.write_text(bare_metal("v", **kw))
    return prepare(f).plan


def gpus(avg=2.0, peak=3.0, fb=0.0, head=True, recent=True):
    return [
        GpuSeries(f"v-{n}", str(g), avg, peak, fb, head, recent) for n in range(2) for g in range(2)
    ]


def test_a_stalled_job_is_acted_on_only_when_the_blueprint_says_so(tmp_path):
    stalled = gpus(avg=0.0, peak=0.0, fb=30000)
    d = decide(plan(tmp_path, action="drain", stalled="act"), stalled, None, "bp")
    assert (d.verdict, d.action) == ("stalled", "drain")
    d = decide(plan(tmp_path, action="drain"), stalled, None, "bp")
    assert (d.verdict, d.action) == ("stalled", None)


def test_memory_in_use_with_some_utilization_is_idle_not_stalled(tmp_path):
    d = decide(plan(tmp_path), gpus(avg=4.0, peak=8.0, fb=30000), None, "bp")
    assert d.verdict == "idle"


def test_no_framebuffer_data_cannot_be_called_idle(tmp_path):
    series = gpus()
    for g in series:
        g.fb_min = None
    d = decide(plan(tmp_path), series, None, "bp")
    assert (d.verdict, d.action) == ("unknown", None)
    assert "stalled or idle cannot be told apart" in d.reasons[0]


def test_no_series_at_all_is_unknown_naming_every_node(tmp_path):
    d = decide(plan(tmp_path), [], None, "bp")
    assert (d.verdict, d.action, d.idle_gpu_hours) == ("unknown", None, None)
    assert "nodes missing or short of GPUs: v-0, v-1" in d.reasons


def test_without_an_idle_policy_nothing_is_ever_acted_on(tmp_path):
    f = tmp_path / "bp.yaml"
    f.write_text(bare_metal("v").split("lifecycle:")[0])
    d = decide(prepare(f).plan, gpus(), None, "bp")
    assert (d.verdict, d.action) == ("idle", None)
    assert "no lifecycle.idle: reported, never reaped" in d.reasons
