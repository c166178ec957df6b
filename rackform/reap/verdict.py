"""A cluster's verdict from its plan, its idle policy and what Prometheus measured, with its
named reasons. Pure: no I/O, so every rule is tested on values. What makes one GPU busy, idle,
stalled or unmeasured is idleness's (one definition, shared with the alerts). The time the
measurements are of is the caller's: the same series and time give the same verdict.

Missing data is never idleness. A cluster is `unknown` (and nothing is done to it) when fewer
GPUs report than the blueprint declares, or when any GPU's samples leave a gap in the window
(named with where it lies); `young` when the only gaps are at the window's start. One busy GPU
keeps the whole cluster `busy`; `stalled` needs every GPU idle or stalled and one stalled.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rackform.blueprint.schema.sections import IdlePolicy
from rackform.plan.model import Plan
from rackform.reap.idleness import GpuStats, Window, gpu_state
from rackform.telemetry import labels as L

# Reap's reading of a cluster without lifecycle.idle: measured and reported, never acted on.
REPORT_ONLY = IdlePolicy()


@dataclass(frozen=True)
class NodeView:
    name: str
    gpus: int  # GPU series reporting for the whole window
    util_avg: float | None
    state: str  # busy | idle | stalled | stale | uncovered | missing | unknown


@dataclass
class Decision:
    """One cluster in one environment: what was measured, the verdict, and what --apply does."""

    source: str
    cluster: str
    environment: str
    purpose: str
    stack: str
    target: str
    window_min: int
    threshold_pct: float
    # busy | idle | stalled | unknown | young | protected | snoozed | locked | acted | off
    verdict: str
    action: str | None  # the idle action --apply carries out (or warns of); None: nothing
    reasons: list[str]
    util_avg: float | None
    gpus_expected: int
    gpus_reporting: int
    nodes: list[NodeView]
    idle_gpu_hours: float | None
    usd_per_gpu_hour: float | None
    measured: str = ""  # the verdict from the measurements alone, before the safety rules
    outcome: str = "dry-run"  # dry-run | none | done | failed | partial | skipped | warned
    results: list[dict] = field(default_factory=list)  # per subject (host, stack) with --apply
    # With an action: "warn" (notify now, act after the grace period) or "act" (carry it out).
    step: str | None = None
    grace: dict = field(default_factory=dict)  # the warning this run found: when, acts after
    read_failed: bool = False  # a read of the world (live tags, BMC, EC2, Slurm) failed
    jobs: list[dict] = field(default_factory=list)  # the scheduler's jobs that keep it busy

    @property
    def idle_usd(self) -> float | None:
        if self.idle_gpu_hours is None or self.usd_per_gpu_hour is None:
            return None
        return self.idle_gpu_hours * self.usd_per_gpu_hour

    def hold(self, verdict: str, reason: str) -> None:
        """A safety rule says no: the verdict becomes why, and nothing is done."""
        self.verdict, self.action, self.step = verdict, None, None
        self.reasons.append(reason)

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "nodes"}
        d["nodes"] = [n.__dict__ for n in self.nodes]
        d["idle_usd"] = None if self.idle_usd is None else round(self.idle_usd, 2)
        if d["util_avg"] is not None:
            d["util_avg"] = round(d["util_avg"], 2)
        return d


def gpus_by_node(plan: Plan) -> dict[str, int]:
    """GPUs per node name where the blueprint lists the nodes (bare metal, colocation)."""
    return {h.name: g.gpus_per_node for _, g in plan.gpu_groups for h in g.hosts}


_NODE_ORDER = ("gap", "unknown", "busy", "stalled", "idle")


def _nodes(series: list[GpuStats], states: list[str], expected: dict[str, int]) -> list[NodeView]:
    by_node: dict[str, list[int]] = {}
    for i, g in enumerate(series):
        by_node.setdefault(g.node, []).append(i)
    views = []
    for name in sorted(set(by_node) | set(expected)):
        idx = by_node.get(name, [])
        node_states = [states[i] for i in idx]
        ok = [i for i in idx if states[i] != "gap"]
        avgs = [series[i].avg for i in ok if series[i].avg is not None]
        state = next((s for s in _NODE_ORDER if s in node_states), "missing")
        if name in expected and len(idx) < expected[name]:
            state = "missing"
        views.append(NodeView(name, len(ok), sum(avgs) / len(avgs) if avgs else None, state))
    return views


def _ago(at: float, t: float) -> int:
    return max(round((at - t) / 60), 0)


def describe_gaps(g: GpuStats, at: float, window_s: int, bucket_s: int) -> str:
    """`node gpu 0: no samples from 100 to 15 min ago` (or its buckets, where not located)."""
    if not g.gaps:
        return f"{g.node} gpu {g.gpu}: {g.short} of {g.expected} scrapes missing"
    parts = []
    for start, end in g.gaps:
        if start <= at - window_s:
            parts.append(f"no samples until {_ago(at, end)} min ago")
        elif end > at - bucket_s:  # the last bucket: Prometheus aligns it at or before `at`
            parts.append(f"no samples in the last {_ago(at, start)} min")
        else:
            parts.append(f"no samples from {_ago(at, start)} to {_ago(at, end)} min ago")
    return f"{g.node} gpu {g.gpu}: " + ", ".join(parts)


def _only_late_start(g: GpuStats, at: float, window_s: int) -> bool:
    """The GPU began reporting inside the window: no sample in the window before, and its only
    gap lies at the window's start (an exporter down for a while after earlier samples is a
    gap, not youth)."""
    return not g.before and bool(g.gaps) and all(start <= at - window_s for start, _ in g.gaps)


def decide(
    plan: Plan,
    series: list[GpuStats],
    usd_per_gpu_hour: float | None,
    source: str,
    at: float,
) -> Decision:
    """The measured verdict at unix time `at` (before the safety rules that need the world: live
    tags, the lock, the audit log, snoozes and the grace period)."""
    idle = plan.lifecycle.idle
    policy = idle or REPORT_ONLY
    window_s = policy.for_minutes * 60
    bucket_s = Window.of(policy).bucket_s
    expected = gpus_by_node(plan)
    states = [gpu_state(g, policy, at) for g in series]
    nodes = _nodes(series, states, expected)
    whole = [g for g, s in zip(series, states, strict=True) if s != "gap"]
    avgs = [g.avg for g in whole if g.avg is not None]
    d = Decision(
        source=source,
        cluster=plan.name,
        environment=plan.environment,
        purpose=plan.purpose,
        stack=plan.stack,
        target=plan.target_type,
        window_min=policy.for_minutes,
        threshold_pct=policy.gpu_util_below_pct,
        verdict="unknown",
        action=None,
        reasons=[],
        util_avg=sum(avgs) / len(avgs) if avgs else None,
        gpus_expected=plan.gpus,
        gpus_reporting=len(whole),
        nodes=nodes,
        idle_gpu_hours=None,
        usd_per_gpu_hour=usd_per_gpu_hour,
    )
    counts = Counter(states)
    window = f"{policy.for_minutes}m"
    gapped = [g for g, s in zip(series, states, strict=True) if s == "gap"]
    missing = [n.name for n in nodes if n.state == "missing"]
    if (
        gapped
        and not missing
        and len(series) >= plan.gpus
        and all(_only_late_start(g, at, window_s) for g in gapped)
    ):
        d.verdict = "young"
        first = max(_ago(at, end) for g in gapped for _, end in g.gaps)
        d.reasons.append(
            f"{len(gapped)} GPUs first report {first} min ago, inside the {window} window: "
            "the cluster (or its exporter) is younger than its window"
        )
        return _policy(d, idle)
    if len(whole) < plan.gpus or missing or gapped:
        d.reasons.append(
            f"{len(whole)} of {plan.gpus} GPUs report the whole {window} window: missing data "
            "is not idleness"
        )
        if missing:
            d.reasons.append("nodes missing or short of GPUs: " + ", ".join(missing))
        for g in gapped:
            d.reasons.append("gap: " + describe_gaps(g, at, window_s, bucket_s))
        return _policy(d, idle)
    hours = policy.for_minutes / 60
    d.idle_gpu_hours = (len(whole) - counts["busy"]) * hours
    if counts["unknown"]:
        d.reasons.append(
            f"{counts['unknown']} GPUs report no framebuffer use: stalled or idle cannot be "
            "told apart"
        )
        return _policy(d, idle)
    threshold = f"{policy.gpu_util_below_pct:g}%"
    peak = max((g.peak for g in whole if g.peak is not None), default=0.0)
    if counts["busy"]:
        d.verdict = "busy"
        d.reasons.append(
            f"{counts['busy']} of {len(whole)} GPUs busy in the window (peak {peak:g}%, "
            f"threshold {threshold}; memory in use or job progress count too)"
        )
        quiet = [n.name for n in nodes if n.state in ("idle", "stalled")]
        if quiet:
            d.reasons.append("idle nodes in a busy cluster: " + ", ".join(quiet))
        return _policy(d, idle)
    if counts["stalled"]:
        d.verdict = "stalled"
        mem = f"{policy.memory_in_use_mib:g} MiB"
        d.reasons.append(
            f"{counts['stalled']} GPUs hold at least {mem} at every sample with no progress "
            f"for {window} (no compute above {threshold}, or a heartbeat that stopped): a "
            "stalled job"
        )
    else:
        d.verdict = "idle"
        d.reasons.append(
            f"every GPU below {threshold} at every sample for {window} (peak {peak:g}%), no "
            "memory in use, no job progress"
        )
    beats = [g.hb_last for g in whole if g.hb_last is not None]
    if not beats:
        d.reasons.append(f"no {L.HEARTBEAT} series: job progress not measured")
    return _policy(d, idle)


def _policy(d: Decision, idle: IdlePolicy | None) -> Decision:
    """What the blueprint lets --apply do with the measured verdict."""
    d.measured = d.verdict
    if idle is None:
        d.reasons.append("no lifecycle.idle: reported, never reaped")
    elif d.verdict == "idle":
        d.action = idle.action
    elif d.verdict == "stalled":
        if idle.stalled == "act":
            d.action = idle.action
        else:
            d.reasons.append("lifecycle.idle.stalled is report: a stalled job is not acted on")
    return d


def protected(d: Decision, plan: Plan) -> None:
    """lifecycle.protect wins over every verdict."""
    if plan.lifecycle.protect:
        d.hold("protected", "lifecycle.protect: true")
