"""The verdict rules on values (no servers): what the end-to-end tests cannot reach cheaply. The
same scenarios run against a real Prometheus in test_idleness_prometheus.py."""

from __future__ import annotations

from clusters import bare_metal

from rackform.engine import prepare
from rackform.reap.idleness import GpuStats
from rackform.reap.verdict import decide

AT = 1_800_000_000.0
EXPECTED = 60  # samples in a 60-minute window, scraped each minute


def plan(tmp_path, **kw):
    f = tmp_path / "bp.yaml"
    f.write_text(bare_metal("v", **kw))
    return prepare(f).plan


def gpus(peak=3.0, avg=2.0, fb=0.0, fb_max=None, samples=EXPECTED, hb=None, gaps=(), before=60):
    fb_max = fb if fb_max is None else fb_max
    return [
        GpuStats(f"v-{n}", str(g), peak=peak, sum=avg * samples, samples=samples, fb_min=fb,
                 fb_max=fb_max, expected=EXPECTED, short=max(EXPECTED - samples, 0),
                 before=before, hb_last=hb, gaps=gaps)
        for n in range(2)
        for g in range(2)
    ]  # fmt: skip


def test_an_idle_cluster_is_idle_with_its_average_reported(tmp_path):
    d = decide(plan(tmp_path, action="drain"), gpus(), None, "bp", AT)
    assert (d.verdict, d.action) == ("idle", "drain")
    assert d.util_avg == 2.0
    assert d.idle_gpu_hours == 4.0


def test_one_sample_above_the_threshold_is_busy_whatever_the_average(tmp_path):
    # A job started minutes ago after an idle hour: the average is low, the peak is not.
    d = decide(plan(tmp_path), gpus(peak=98.0, avg=6.5), None, "bp", AT)
    assert (d.verdict, d.action) == ("busy", None)
    assert "peak 98%" in d.reasons[0]


def test_a_stalled_job_is_acted_on_only_when_the_blueprint_says_so(tmp_path):
    stalled = gpus(peak=0.0, avg=0.0, fb=30000)
    d = decide(plan(tmp_path, action="drain", stalled="act"), stalled, None, "bp", AT)
    assert (d.verdict, d.action) == ("stalled", "drain")
    d = decide(plan(tmp_path, action="drain"), stalled, None, "bp", AT)
    assert (d.verdict, d.action) == ("stalled", None)


def test_a_probe_blip_on_a_hung_job_stays_stalled_not_idle(tmp_path):
    # 61 GB held on every GPU; a health probe touches each at 2% now and then.
    d = decide(plan(tmp_path, action="drain"), gpus(peak=2.0, avg=0.1, fb=61000), None, "bp", AT)
    assert (d.verdict, d.action) == ("stalled", None)


def test_full_utilization_with_a_stopped_heartbeat_is_stalled(tmp_path):
    # The NCCL hang: 100% GPU_UTIL spinning, memory held, the job's last step 90 minutes ago.
    hung = gpus(peak=100.0, avg=100.0, fb=61000, hb=AT - 90 * 60)
    d = decide(plan(tmp_path), hung, None, "bp", AT)
    assert d.verdict == "stalled"
    # The same with a heartbeat that advanced 2 minutes ago is a job at work.
    d = decide(plan(tmp_path), gpus(peak=100.0, avg=100.0, fb=61000, hb=AT - 120), None, "bp", AT)
    assert d.verdict == "busy"


def test_without_a_heartbeat_full_utilization_reads_busy_and_says_progress_is_unmeasured(tmp_path):
    d = decide(plan(tmp_path), gpus(peak=100.0, avg=100.0, fb=61000), None, "bp", AT)
    assert d.verdict == "busy"
    d = decide(plan(tmp_path), gpus(), None, "bp", AT)
    assert any("job progress not measured" in r for r in d.reasons)


def test_progress_makes_a_quiet_gpu_busy(tmp_path):
    # A job in a CPU-bound phase (data loading) at 0% GPU, its heartbeat advancing.
    d = decide(plan(tmp_path), gpus(peak=0.0, avg=0.0, fb=0.0, hb=AT - 60), None, "bp", AT)
    assert d.verdict == "busy"


def test_memory_in_use_for_part_of_the_window_is_not_idle(tmp_path):
    d = decide(plan(tmp_path), gpus(peak=4.0, fb=0.0, fb_max=30000), None, "bp", AT)
    assert (d.verdict, d.action) == ("busy", None)


def test_a_gap_inside_the_window_is_unknown_and_says_where(tmp_path):
    # The exporter was down from 100 to 15 minutes ago (of a 60-minute window: 45 minutes).
    series = gpus(samples=15, gaps=((AT - 52 * 60, AT - 15 * 60),))
    d = decide(plan(tmp_path, action="drain"), series, None, "bp", AT)
    assert (d.verdict, d.action) == ("unknown", None)
    assert d.gpus_reporting == 0
    assert any("v-0 gpu 0: no samples from 52 to 15 min ago" in r for r in d.reasons)


def test_two_missed_scrapes_are_tolerated_three_are_not(tmp_path):
    d = decide(plan(tmp_path), gpus(samples=EXPECTED - 2), None, "bp", AT)
    assert d.verdict == "idle"
    d = decide(plan(tmp_path), gpus(samples=EXPECTED - 3), None, "bp", AT)
    assert d.verdict == "unknown"


def test_a_stale_exporter_is_unknown(tmp_path):
    series = gpus(samples=30, gaps=((AT - 30 * 60, AT),))
    d = decide(plan(tmp_path), series, None, "bp", AT)
    assert d.verdict == "unknown"
    assert any("no samples in the last 30 min" in r for r in d.reasons)


def test_a_cluster_younger_than_its_window_is_young(tmp_path):
    series = gpus(samples=30, gaps=((AT - 62 * 60, AT - 30 * 60),), before=0)
    d = decide(plan(tmp_path, action="drain"), series, None, "bp", AT)
    assert (d.verdict, d.action) == ("young", None)


def test_an_exporter_down_since_before_the_window_is_a_gap_not_youth(tmp_path):
    series = gpus(samples=30, gaps=((AT - 62 * 60, AT - 30 * 60),), before=40)
    d = decide(plan(tmp_path, action="drain"), series, None, "bp", AT)
    assert (d.verdict, d.action) == ("unknown", None)
    assert any("no samples until 30 min ago" in r for r in d.reasons)


def test_young_with_a_missing_node_is_unknown(tmp_path):
    young = gpus(samples=30, gaps=((AT - 62 * 60, AT - 30 * 60),), before=0)
    series = [g for g in young if g.node == "v-0"]
    d = decide(plan(tmp_path), series, None, "bp", AT)
    assert d.verdict == "unknown"


def test_no_framebuffer_data_cannot_be_called_idle(tmp_path):
    series = gpus()
    for g in series:
        g.fb_min = g.fb_max = None
    d = decide(plan(tmp_path), series, None, "bp", AT)
    assert (d.verdict, d.action) == ("unknown", None)
    assert "stalled or idle cannot be told apart" in d.reasons[0]


def test_no_series_at_all_is_unknown_naming_every_node(tmp_path):
    d = decide(plan(tmp_path), [], None, "bp", AT)
    assert (d.verdict, d.action, d.idle_gpu_hours) == ("unknown", None, None)
    assert "nodes missing or short of GPUs: v-0, v-1" in d.reasons


def test_without_an_idle_policy_nothing_is_ever_acted_on(tmp_path):
    f = tmp_path / "bp.yaml"
    f.write_text(bare_metal("v").split("lifecycle:")[0])
    d = decide(prepare(f).plan, gpus(), None, "bp", AT)
    assert (d.verdict, d.action) == ("idle", None)
    assert "no lifecycle.idle: reported, never reaped" in d.reasons
