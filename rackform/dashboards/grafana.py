"""`rackform dashboards`: one Grafana dashboard for every cluster (a variable picks the cluster
and environment), built with grafana-foundation-sdk rather than written as JSON: each panel's
query selects the series rackform exports (`rackform metrics`' lifecycle figures), the
recording rules `rackform alerts` writes, and dcgm-exporter's series as the dcgm role's scrape
config labels them; the same views as `rackform report`'s page, cost per team rather than per
job (a series per job would grow without end), and without goodput (a simulation's output:
Prometheus holds no series of it)."""

from __future__ import annotations

import json

from grafana_foundation_sdk.builders import bargauge, stat, timeseries
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as pq
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from rackform.alerts.rules import IDLE_HOURS
from rackform.telemetry import labels as L

UID = "rackform-clusters"
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = f'{{{L.CLUSTER}="$cluster",{L.ENVIRONMENT}="$environment"}}'


def _query(expr: str, legend: str = "", instant: bool = False) -> pq.Dataquery:
    q = pq.Dataquery().expr(expr).datasource(DATASOURCE).ref_id("A")
    if legend:
        q = q.legend_format(legend)
    return q.instant() if instant else q.range()


def _thresholds(*steps: tuple[float | None, str]) -> db.ThresholdsConfig:
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=c) for v, c in steps])
    )


def _variables() -> list:
    return [
        db.DatasourceVariable("datasource").label("Prometheus").type("prometheus"),
        db.QueryVariable("cluster")
        .label("cluster")
        .datasource(DATASOURCE)
        .query(f"label_values({L.GPU_UTIL}, {L.CLUSTER})")
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED),
        db.QueryVariable("environment")
        .label("environment")
        .datasource(DATASOURCE)
        .query(f'label_values({L.GPU_UTIL}{{{L.CLUSTER}="$cluster"}}, {L.ENVIRONMENT})')
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED),
    ]


def _utilization(target_pct: float) -> list:
    util = (
        timeseries.Panel()
        .title(f"GPU utilization against the {target_pct:g}% target")
        .with_target(_query(f"avg({L.GPU_UTIL}{SEL})", "mean of the cluster's GPUs"))
        .unit("percent")
        .min(0)
        .max(100)
        .thresholds(_thresholds((None, "red"), (target_pct, "green")))
        .thresholds_style(cb.GraphThresholdsStyleConfig().mode(cm.GraphTresholdsStyleMode.LINE))
        .span(16)
        .height(8)
    )
    idle = (
        timeseries.Panel()
        .title("Idle GPU-hours over the idle policy's window")
        .description(
            "GPUs below the idle policy's level, each sample counted (rackform alerts' recording rule)."
        )
        .with_target(_query(f"{IDLE_HOURS}{SEL}", "idle GPU-hours ({{window}})"))
        .unit("h")
        .min(0)
        .span(8)
        .height(8)
    )
    return [util, idle]


def _lifecycle() -> list:
    def figure(title: str, metric: str, unit: str) -> stat.Panel:
        return (
            stat.Panel()
            .title(title)
            .with_target(_query(f"{metric}{SEL}", instant=True))
            .unit(unit)
            .span(6)
            .height(5)
        )

    failures = L.LIFECYCLE_FAILURES
    return [
        figure("Mean time to repair", L.LIFECYCLE_MTTR, "s"),
        figure("Mean time between failures", L.LIFECYCLE_TBF, "s"),
        figure("Failed nodes not returned", L.LIFECYCLE_OPEN, "short"),
        figure("Node-hours out for rolling changes", L.LIFECYCLE_MAINTENANCE_SECONDS, "s"),
        timeseries.Panel()
        .title("Failures in the last 24 h")
        .description(
            "Detections in the audit log (rackform metrics): the counter less its least in the day, exact counts."
        )
        .with_target(_query(f"{failures}{SEL} - min_over_time({failures}{SEL}[1d])", "failures"))
        .unit("short")
        .min(0)
        .span(12)
        .height(8),
        bargauge.Panel()
        .title("Mean time to repair per node")
        .description("Detection to return to service, over each node's repaired failures.")
        .with_target(_query(f"{L.LIFECYCLE_NODE_MTTR}{SEL}", "{{node}}", instant=True))
        .unit("s")
        .orientation(cm.VizOrientation.HORIZONTAL)
        .span(12)
        .height(8),
    ]


def _cost() -> list:
    def per_team(title: str, expr: str, unit: str) -> bargauge.Panel:
        return (
            bargauge.Panel()
            .title(title)
            .description(
                "From the job records `rackform metrics --jobs` was given, per Slurm account."
            )
            .with_target(_query(expr, "{{account}}", instant=True))
            .unit(unit)
            .orientation(cm.VizOrientation.HORIZONTAL)
            .span(12)
            .height(8)
        )

    return [
        per_team("GPU-hours per team", f"{L.JOBS_ACCOUNT_GPU_SECONDS}{SEL} / 3600", "h"),
        per_team("Cost per team", f"{L.JOBS_ACCOUNT_USD}{SEL}", "currencyUSD"),
    ]


def dashboard(target_pct: float) -> db.Dashboard:
    d = (
        db.Dashboard("rackform: clusters")
        .uid(UID)
        .tags(["rackform"])
        .time("now-7d", "now")
        .refresh("5m")
        .variables(_variables())
        .with_row(db.Row("Utilization"))
    )
    for p in _utilization(target_pct):
        d = d.with_panel(p)
    d = d.with_row(db.Row("Failures and repairs"))
    for p in _lifecycle():
        d = d.with_panel(p)
    d = d.with_row(db.Row("Cost"))
    for p in _cost():
        d = d.with_panel(p)
    return d


def as_json(target_pct: float) -> str:
    return (
        json.dumps(dashboard(target_pct).build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
    )
