"""Idleness, defined once: from a cluster's plan, its idle policy and what Prometheus measured,
a verdict with its named reasons. Pure: no I/O, so every rule is tested on values.

Missing data is never idleness. A cluster is `unknown` (and nothing is done to it) when fewer
GPUs report than the blueprint declares, when a series has gone stale, or when the window is not
covered from its start. A GPU with memory in use and ~0% utilization all window is a `stalled`
job, not idle capacity. One GPU at or above the threshold keeps the whole cluster `busy`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rackform.blueprint.schema.sections import IdlePolicy
from rackform.plan.model import Plan
from rackform.reap.measure import GpuSeries

# A stalled GPU's utilization never rises above this all window (percent).
STALL_PEAK_PCT = 1.0
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
    verdict: str  # busy | idle | stalled | unknown | young | protected | locked | acted
    action: str | None  # what --apply does; None: nothing
    reasons: list[str]
    util_avg: float | None
    gpus_expected: int
    gpus_reporting: int
    nodes: list[NodeView]
    idle_gpu_hours: float | None
    usd_per_gpu_hour: float | None
    measured: str = ""  # the verdict from the measurements alone, before the safety rules
    outcome: str = "dry-run"  # dry-run | none | done | failed | partial | skipped
    results: list[dict] = field(default_factory=list)  # per subject (host, stack) with --apply

    @property
    def idle_usd(self) -> float | None:
        if self.idle_gpu_hours is None or self.usd_per_gpu_hour is None:
            return None
        return self.idle_gpu_hours * self.usd_per_gpu_hour

    def hold(self, verdict: str, reason: str) -> None:
        """A safety rule says no: the verdict becomes why, and nothing is done."""
        self.verdict, self.action = verdict, None
        self.reasons.append(reason)

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "nodes"}
        d["nodes"] = [n.__dict__ for n in self.nodes]
        d["idle_usd"] = None if self.idle_usd is None else round(self.idle_usd, 2)
        if d["util_avg"] is not None:
            d["util_avg"] = round(d["util_avg"], 2)
        return d


def expected_nodes(plan: Plan) -> dict[str, int]:
    """GPUs per node name where the blueprint lists the nodes (bare metal, colocation)."""
    return {h.name: g.gpus_per_node for _, g in plan.gpu_groups for h in g.hosts}


def _gpu_state(g: GpuSeries, policy: IdlePolicy) -> str:
    if not g.recent:
        return "stale"
    if not g.head:
        return "uncovered"
    if g.avg is None or g.peak is None:
        return "unknown"
    if g.avg >= policy.gpu_util_below_pct:
        return "busy"
    if g.fb_min is None:
        return "unknown"  # cannot tell a stalled job from an empty GPU
    if g.peak <= STALL_PEAK_PCT and g.fb_min >= policy.memory_in_use_mib:
        return "stalled"
    return "idle"


_NODE_ORDER = ("stale", "uncovered", "unknown", "busy", "stalled", "idle")


def _nodes(series: list[GpuSeries], states: list[str], expected: dict[str, int]) -> list[NodeView]:
    by_node: dict[str, list[int]] = {}
    for i, g in enumerate(series):
        by_node.setdefault(g.node, []).append(i)
    views = []
    for name in sorted(set(by_node) | set(expected)):
        idx = by_node.get(name, [])
        node_states = [states[i] for i in idx]
        ok = [i for i in idx if states[i] not in ("stale", "uncovered")]
        avgs = [series[i].avg for i in ok if series[i].avg is not None]
        state = next((s for s in _NODE_ORDER if s in node_states), "missing")
        if name in expected and len(idx) < expected[name]:
            state = "missing"
        views.append(NodeView(name, len(ok), sum(avgs) / len(avgs) if avgs else None, state))
    return views


def decide(
    plan: Plan, series: list[GpuSeries], usd_per_gpu_hour: float | None, source: str
) -> Decision:
    """The measured verdict (before the safety rules that need the world: live tags, the lock,
    the audit log)."""
    idle = plan.lifecycle.idle
    policy = idle or REPORT_ONLY
    expected = expected_nodes(plan)
    states = [_gpu_state(g, policy) for g in series]
    nodes = _nodes(series, states, expected)
    whole = [g for g, s in zip(series, states, strict=True) if s not in ("stale", "uncovered")]
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
    if series and counts["uncovered"] == len(series) and len(series) >= plan.gpus:
        d.verdict = "young"
        d.reasons.append(
            f"every GPU's first sample is inside the {window} window: the cluster is younger "
            "than its window"
        )
        return _policy(d, idle)
    missing = [n.name for n in nodes if n.state == "missing"]
    gaps = {s: [n.name for n in nodes if n.state == s] for s in ("stale", "uncovered")}
    if len(whole) < plan.gpus or missing or gaps["stale"] or gaps["uncovered"]:
        d.reasons.append(
            f"{len(whole)} of {plan.gpus} GPUs report {window} of utilization: missing data is "
            "not idleness"
        )
        if missing:
            d.reasons.append("nodes missing or short of GPUs: " + ", ".join(missing))
        if gaps["stale"]:
            d.reasons.append(f"stale (no sample in the last minutes): {', '.join(gaps['stale'])}")
        if gaps["uncovered"]:
            d.reasons.append(f"window not covered from its start: {', '.join(gaps['uncovered'])}")
        return _policy(d, idle)
    hours = policy.for_minutes / 60
    d.idle_gpu_hours = (len(whole) - counts["busy"]) * hours
    if counts["unknown"]:
        d.reasons.append(
            f"{counts['unknown']} GPUs near 0% report no framebuffer use: stalled or idle "
            "cannot be told apart"
        )
        return _policy(d, idle)
    threshold = f"{policy.gpu_util_below_pct:g}%"
    if counts["busy"]:
        d.verdict = "busy"
        d.reasons.append(f"{counts['busy']} of {len(whole)} GPUs at or above {threshold}")
        idle_nodes = [n.name for n in nodes if n.state in ("idle", "stalled")]
        if idle_nodes:
            d.reasons.append("idle nodes in a busy cluster: " + ", ".join(idle_nodes))
        return _policy(d, idle)
    if counts["stalled"]:
        d.verdict = "stalled"
        d.reasons.append(
            f"{counts['stalled']} GPUs hold memory at ~0% utilization for {window}: a stalled job"
        )
    else:
        d.verdict = "idle"
        d.reasons.append(f"every GPU below {threshold} for {window}")
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
