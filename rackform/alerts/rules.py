"""Prometheus rules for one cluster in one environment, from its plan: a rule group a stock
Prometheus loads as it is (`rule_files:`), checked by `promtool check rules` and unit-tested
with `promtool test rules` in the test suite.

Every expression selects dcgm-exporter's series by the labels the `dcgm` role's scrape config
writes (the telemetry labels), with equality matchers, so `absent()` keeps them too."""

from __future__ import annotations

from rackform.plan.model import Plan
from rackform.reap.idleness import alert_exprs
from rackform.reap.verdict import REPORT_ONLY
from rackform.telemetry import labels as L

BY = f"{L.CLUSTER}, {L.ENVIRONMENT}, {L.PURPOSE}"
UTIL_AVG = "rackform_cluster:gpu_util:avg"
GPUS = "rackform_cluster:gpus:count"
IDLE_HOURS = "rackform_cluster:idle_gpu_hours:window"


def group(plan: Plan) -> dict:
    ident = {L.CLUSTER: plan.name, L.ENVIRONMENT: plan.environment, L.PURPOSE: plan.purpose}
    sel = L.selector(**ident)
    u = f"{L.GPU_UTIL}{sel}"
    policy = plan.lifecycle.idle or REPORT_ONLY
    below = f"{policy.gpu_util_below_pct:g}"
    window = f"{policy.for_minutes}m"
    rules: list[dict] = [
        {"record": UTIL_AVG, "expr": f"avg by ({BY}) ({u})"},
        {"record": GPUS, "expr": f"count by ({BY}) ({u})"},
        {
            # Each GPU's share of the window below the idle policy's level (sampled each
            # minute), times the window's hours, summed over the cluster.
            "record": IDLE_HOURS,
            "expr": f"sum by ({BY}) (avg_over_time(({u} < bool {below})[{window}:1m])) * "
            f"{policy.for_minutes / 60:g}",
            "labels": {"window": window},
        },
    ]
    alerts: list[dict] = []
    if plan.purpose == "training":
        level = plan.figures.utilization.alert_below_fraction.value * 100
        minutes = plan.lifecycle.utilization_alert_minutes
        alerts.append(
            _alert(
                "RackformGpuUtilizationLow",
                f"avg by ({BY}) (avg_over_time({u}[{minutes}m])) < {level:g}",
                "warning",
                f"{plan.name} ({plan.environment}) GPU utilization below {level:g}% over "
                f"{minutes} min",
                'Average {{ $value | printf "%.1f" }}% across the cluster\'s GPUs; the target '
                "is 85%.",
            )
        )
    if plan.lifecycle.idle is not None:
        # reap's own definition (rackform.reap.idleness): every sample of every GPU, coverage
        # counted, memory and job progress; the same answer reap gives (tested together).
        idle_expr, stalled_expr = alert_exprs(sel[1:-1], policy, plan.gpus)
        alerts.append(
            _alert(
                "RackformClusterIdle",
                idle_expr,
                "warning",
                f"{plan.name} ({plan.environment}) idle: every GPU below {below}% at every "
                f"sample for {window}",
                f"`rackform reap` would {policy.action} it "
                f"(lifecycle.idle.action: {policy.action}).",
            )
        )
        alerts.append(
            _alert(
                "RackformClusterStalled",
                stalled_expr,
                "warning",
                f"{plan.name} ({plan.environment}) stalled: GPU memory held with no progress "
                f"for {window}",
                "A job holds the GPUs without computing, or computes without its heartbeat "
                "advancing (an NCCL hang): look at it before its GPU-hours add up.",
            )
        )
    alerts += [
        _alert(
            "RackformDcgmExporterDown",
            f"up{sel} == 0",
            "critical",
            "dcgm-exporter on {{ $labels.node }} is down",
            "Prometheus cannot scrape it: the node's GPUs are unmonitored and reap reads the "
            "cluster as unknown.",
            for_="5m",
        ),
        _alert(
            "RackformGpuMissing",
            f"(count({u}) or vector(0)) < {plan.gpus}",
            "critical",
            f"{plan.name} ({plan.environment}): fewer GPUs report than the {plan.gpus} declared",
            "{{ $value }} GPUs report DCGM_FI_DEV_GPU_UTIL.",
            for_="10m",
        ),
        _alert(
            "RackformGpuXidError",
            f"max_over_time({L.XID_ERRORS}{sel}[5m]) > 0",
            "critical",
            "XID {{ $value }} on {{ $labels.node }} GPU {{ $labels.gpu }}",
            "The driver reported an XID error; check dmesg and the job on that GPU.",
        ),
        _alert(
            "RackformGpuEccUncorrectable",
            f"{L.ECC_DBE}{sel} > 0",
            "critical",
            "Uncorrectable ECC errors on {{ $labels.node }} GPU {{ $labels.gpu }}",
            "Drain the node and reset or replace the GPU.",
        ),
        _alert(
            "RackformGpuRowRemapPending",
            f"{L.ROW_REMAP_PENDING}{sel} > 0",
            "warning",
            "Row remap pending on {{ $labels.node }} GPU {{ $labels.gpu }}",
            "Reset the GPU when it is idle to apply the remap.",
        ),
    ]
    # Each rule also carries its cluster's labels as its own: the series already have them, and
    # with them the same rule for two environments is two rules (promtool's duplicate lint).
    for rule in rules + alerts:
        rule["labels"] = {**rule.get("labels", {}), **ident}
    return {"name": f"rackform-{plan.stack}", "rules": rules + alerts}


def _alert(
    name: str,
    expr: str,
    severity: str,
    summary: str,
    description: str,
    for_: str | None = None,
) -> dict:
    rule: dict = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


def rule_file(plans: list[Plan]) -> dict:
    return {"groups": [group(p) for p in plans]}
