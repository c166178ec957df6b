"""A cluster's hourly utilization and idle GPU-hours over the report's window, from
Prometheus: two queries a cluster, each a subquery read at once (never a query per hour).
The idle GPU-hours are reap's way of counting them (`alerts.rules`' recording rule): each
GPU's share of samples below the idle policy's level, so a GPU that did not report is unknown,
never idle."""

from __future__ import annotations

from rackform.report.model import Utilization
from rackform.telemetry import labels as L
from rackform.telemetry.prometheus import Prometheus

BY = f"{L.CLUSTER}, {L.ENVIRONMENT}, {L.PURPOSE}"


def queries(key: L.Key, below_pct: float, hours: int) -> tuple[str, str]:
    """The mean-utilization and idle-GPU-hours subqueries, an hour a point over `hours`."""
    sel = L.selector(cluster=key.cluster, environment=key.environment, purpose=key.purpose)
    u = f"{L.GPU_UTIL}{sel}"
    util = f"(avg by ({BY}) (avg_over_time({u}[1h])))[{hours}h:1h]"
    idle = f"(sum by ({BY}) (avg_over_time(({u} < bool {below_pct:g})[1h:1m])))[{hours}h:1h]"
    return util, idle


def _points(answer: list[tuple[dict[str, str], list[tuple]]]) -> tuple[tuple[float, float], ...]:
    # One series at most (aggregated to the cluster); none where no GPU reported.
    return tuple((t, v) for _, values in answer[:1] for t, v in values)


def fetch(
    prom: Prometheus, key: L.Key, below_pct: float, target_pct: float, hours: int, at: float
) -> Utilization:
    util, idle = queries(key, below_pct, hours)
    return Utilization(
        _points(prom.query_range(util, at)),
        _points(prom.query_range(idle, at)),
        target_pct,
        below_pct,
    )
