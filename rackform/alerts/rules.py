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
    alerts += lifecycle_alerts(plan, sel)
    # Each rule also carries its cluster's labels as its own: the series already have them, and
    # with them the same rule for two environments is two rules (promtool's duplicate lint).
    for rule in rules + alerts:
        rule["labels"] = {**rule.get("labels", {}), **ident}
    return {"name": f"rackform-{plan.stack}", "rules": rules + alerts}


def lifecycle_alerts(plan: Plan, sel: str) -> list[dict]:
    """Failures and repairs, from `rackform metrics`' counters (its audit log, exported by
    node_exporter's textfile collector). A counter's growth over a window is its value less
    its least in the window: exact counts, where `increase()` would extrapolate one failure in
    a short series to more than one; a log rotated (the counter reset) counts from there."""
    lc = plan.lifecycle

    def grown(name: str, window: str) -> str:
        return f"({name}{sel} - min_over_time({name}{sel}[{window}]))"

    hours = f"{lc.mttr_alert_hours:g}"
    limit = max(1.0, lc.failures_alert_node_share * plan.nodes)
    return [
        _alert(
            "RackformRepairsSlow",
            f"{grown(L.LIFECYCLE_REPAIR_SECONDS, '7d')} / {grown(L.LIFECYCLE_REPAIRS, '7d')}"
            f" > {lc.mttr_alert_hours * 3600:g}",
            "warning",
            f"{plan.name} ({plan.environment}): failed nodes take over {hours} h to return",
            "Mean time to repair over the last 7 days {{ $value | humanizeDuration }} "
            f"(lifecycle.mttr_alert_hours: {hours}): look at the tickets heal left and the "
            "nodes waiting for a person (`rackform status`).",
        ),
        _alert(
            "RackformFailuresHigh",
            f"{grown(L.LIFECYCLE_FAILURES, '1d')} > {limit:g}",
            "warning",
            f"{plan.name} ({plan.environment}): more than {limit:g} node failures in a day",
            "{{ $value }} failures detected in the last 24 h "
            f"(lifecycle.failures_alert_node_share: {lc.failures_alert_node_share:g} of "
            f"{plan.nodes} nodes): a fleet-wide cause (driver, firmware, power, cooling) is "
            "likelier than that many bad nodes.",
        ),
    ]


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
