"""Idleness, defined once. The PromQL statistics reap measures per GPU, the rule that turns them
into a GPU's state, and the same rule as PromQL for the alerts `rackform alerts` writes: a test
runs both against one backfilled Prometheus and requires the same answer for every scenario.

A GPU is one identity (cluster, environment, purpose, node, gpu: labels.GPU_ID), whatever its
other labels do: every statistic is aggregated by it in PromQL, so a relabelled series (a
re-addressed node's `instance`) is read whole, never "the last one wins".

Over the window, per GPU:
- idle: every sample below the threshold (the peak, never the average, decides) and no
  framebuffer in use at any sample, with no job progress on its node;
- stalled: framebuffer held at every sample with no progress: either no compute at all, or
  compute with a heartbeat that has stopped (an NCCL hang spins at 100% and makes no steps);
- busy: anything else (a sample above the threshold, memory in use for part of the window, a
  heartbeat that advanced);
- coverage is counted: a GPU's samples in the window (all its series together) against the
  samples the scrape interval implies; more than GAP_TOLERANCE_SCRAPES short is a gap, a late
  start or a stale exporter: not measured, never idle. Where a GPU has more samples than
  implied (two series overlapping, e.g. scraped twice), counting could hide a gap: its coverage
  is counted again in buckets of two scrape intervals, each of which must hold a sample.
"""

from __future__ import annotations

from dataclasses import dataclass

from rackform.blueprint.schema.sections import IdlePolicy
from rackform.telemetry import labels as L

STAT = "rackform_stat"
# Buckets two scrape intervals wide: one missed scrape never empties one; a bucket's emptiness
# means a real gap.
SCRAPES_PER_BUCKET = 2
# Scrapes a GPU may miss in its window (jitter, an exporter restart) before it is a gap.
GAP_TOLERANCE_SCRAPES = 2

BY_GPU = ", ".join(L.GPU_ID)
BY_NODE = ", ".join(L.NODE_ID)
BY_CLUSTER = f"{L.CLUSTER}, {L.ENVIRONMENT}, {L.PURPOSE}"


@dataclass(frozen=True)
class Window:
    minutes: int
    scrape_s: int

    @property
    def seconds(self) -> int:
        return self.minutes * 60

    @property
    def samples(self) -> int:
        """The samples one series has in the window at the scrape interval."""
        return self.seconds // self.scrape_s

    @property
    def bucket_s(self) -> int:
        return SCRAPES_PER_BUCKET * self.scrape_s

    @property
    def range(self) -> str:
        return f"[{self.seconds}s]"

    @property
    def subquery(self) -> str:
        return f"[{self.seconds}s:{self.bucket_s}s]"

    @staticmethod
    def of(policy: IdlePolicy, minutes: int | None = None) -> Window:
        return Window(minutes or policy.for_minutes, policy.scrape_interval_s)


def stats(sel: str, w: Window) -> dict[str, str]:
    """Every statistic reap reads, for the series `sel` (matchers, without braces) selects."""
    util, fb, hb = f"{L.GPU_UTIL}{{{sel}}}", f"{L.FB_USED}{{{sel}}}", f"{L.HEARTBEAT}{{{sel}}}"
    return {
        "peak": f"max by ({BY_GPU}) (max_over_time({util}{w.range}))",
        "sum": f"sum by ({BY_GPU}) (sum_over_time({util}{w.range}))",
        "samples": f"sum by ({BY_GPU}) (count_over_time({util}{w.range}))",
        "fb_min": f"min by ({BY_GPU}) (min_over_time({fb}{w.range}))",
        "fb_max": f"max by ({BY_GPU}) (max_over_time({fb}{w.range}))",
        "hb_last": f"max by ({BY_NODE}) (max_over_time({hb}{w.range}))",
    }


def presence(sel: str, w: Window) -> str:
    """Per GPU, the buckets with samples, as a range: where a shortfall lies (a matrix)."""
    return (
        f"(max by ({BY_GPU}) (count_over_time({L.GPU_UTIL}{{{sel}}}[{w.bucket_s}s]))){w.subquery}"
    )


def before(sel: str, w: Window) -> str:
    """Per GPU, its samples in the window before this one: a GPU with none there is new, not
    gapped (asked only where a shortfall is being located)."""
    util = f"{L.GPU_UTIL}{{{sel}}}"
    return f"max by ({BY_GPU}) (count_over_time({util}{w.range} offset {w.seconds}s))"


def batch(sel: str, w: Window) -> str:
    """All the statistics in one expression, each answer labelled with the statistic it is."""
    return " or ".join(
        f'label_replace({expr}, "{STAT}", "{name}", "", "")' for name, expr in stats(sel, w).items()
    )


@dataclass
class GpuStats:
    node: str
    gpu: str
    peak: float | None = None
    sum: float | None = None  # of every utilization sample in the window
    samples: int = 0
    fb_min: float | None = None
    fb_max: float | None = None
    expected: int = 0  # samples the scrape interval implies in the window
    short: int = 0  # scrapes missing (counted, or from empty buckets where series overlap)
    before: int = 0  # samples in the window before this one
    hb_last: float | None = None  # the node's last heartbeat in the window (a job's last step)
    gaps: tuple[tuple[float, float], ...] = ()  # (from, to) unix times with no samples

    @property
    def avg(self) -> float | None:
        return None if self.sum is None or not self.samples else self.sum / self.samples

    @property
    def overlapping(self) -> bool:
        """More samples than one series scraped each interval: two series overlap."""
        return self.samples > self.expected + GAP_TOLERANCE_SCRAPES


def gpu_state(g: GpuStats, policy: IdlePolicy, at: float) -> str:
    """busy | idle | stalled | gap | unknown, by the rule in this module's docstring."""
    if g.short > GAP_TOLERANCE_SCRAPES:
        return "gap"
    if g.peak is None or g.fb_min is None or g.fb_max is None:
        return "unknown"  # without framebuffer data a stalled job and an empty GPU look alike
    since = at - policy.for_minutes * 60
    progress = g.hb_last is not None and g.hb_last >= since
    no_progress = g.hb_last is not None and not progress
    held = g.fb_min >= policy.memory_in_use_mib
    if progress:
        return "busy"
    if g.peak >= policy.gpu_util_below_pct:
        return "stalled" if held and no_progress else "busy"
    if held:
        return "stalled"
    if g.fb_max >= policy.memory_in_use_mib:
        return "busy"  # memory in use for part of the window: a process came or went
    return "idle"


def alert_exprs(sel: str, policy: IdlePolicy, gpus: int) -> tuple[str, str]:
    """(idle, stalled): the cluster-level alert expressions, `gpu_state` in PromQL. Each fires
    only when every declared GPU is covered and in that state (stalled: each idle or stalled,
    at least one stalled), as reap's verdicts."""
    w = Window.of(policy)
    s = stats(sel, w)
    t, m = f"{policy.gpu_util_below_pct:g}", f"{policy.memory_in_use_mib:g}"
    # Counted coverage only: where two series overlap the alert may count a gap as covered;
    # reap counts such a GPU again in buckets.
    covered = f"({s['samples']} >= {w.samples - GAP_TOLERANCE_SCRAPES})"
    progress = f"({s['hb_last']} >= time() - {w.seconds})"
    no_progress = f"({s['hb_last']} < time() - {w.seconds})"
    idle_gpu = (
        f"(({s['peak']} < {t}) and on ({BY_GPU}) ({s['fb_max']} < {m}) and on ({BY_GPU}) "
        f"{covered}) unless on ({BY_NODE}) {progress}"
    )
    held = f"({s['fb_min']} >= {m}) and on ({BY_GPU}) {covered}"
    stalled_gpu = (
        f"((({held}) and on ({BY_GPU}) ({s['peak']} < {t})) unless on ({BY_NODE}) {progress})"
        f" or (({held}) and on ({BY_GPU}) ({s['peak']} >= {t}) and on ({BY_NODE}) {no_progress})"
    )
    idle = f"count by ({BY_CLUSTER}) ({idle_gpu}) >= {gpus}"
    stalled = (
        f"(count by ({BY_CLUSTER}) (({idle_gpu}) or ({stalled_gpu})) >= {gpus})"
        f" and on ({BY_CLUSTER}) (count by ({BY_CLUSTER}) ({stalled_gpu}) > 0)"
    )
    return idle, stalled
