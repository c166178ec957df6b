"""What Prometheus says about each GPU of each cluster over its idle window, fetched in one query
per distinct window for every cluster at once (never one per cluster or node).

Per GPU series (a node's `gpu`): its average and peak utilization over the window, the least
framebuffer it held, and whether it has samples at both ends of the window: at the start (the
window is covered) and in the last few minutes (the series is not stale)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from rackform.reap import labels as L
from rackform.reap.prometheus import Prometheus

# Minutes at each end of the window that must hold a sample: Prometheus's own staleness
# lookback, so a series that stopped longer ago than this is stale.
EDGE_MIN = 5
STAT = "rackform_stat"


@dataclass(frozen=True)
class Key:
    cluster: str
    environment: str
    purpose: str


@dataclass
class GpuSeries:
    node: str
    gpu: str
    avg: float | None = None  # mean utilization % over the window
    peak: float | None = None  # highest utilization % in the window
    fb_min: float | None = None  # least framebuffer in use (MiB) in the window
    head: bool = False  # samples in the window's first EDGE_MIN minutes
    recent: bool = False  # samples in the last EDGE_MIN minutes


def _alternation(values: Iterable[str]) -> str:
    return "|".join(re.escape(v) for v in sorted(set(values)))


def batch_expr(keys: list[Key], window_min: int) -> str:
    """One PromQL expression answering every statistic for every GPU of these clusters, each
    answer labelled with the statistic it is."""
    sel = (
        f'{{{L.CLUSTER}=~"{_alternation(k.cluster for k in keys)}",'
        f'{L.ENVIRONMENT}=~"{_alternation(k.environment for k in keys)}",'
        f'{L.PURPOSE}=~"{_alternation(k.purpose for k in keys)}"}}'
    )
    w = f"[{window_min}m]"
    head_offset = max(window_min - EDGE_MIN, 0)
    stats = {
        "avg": f"avg_over_time({L.GPU_UTIL}{sel}{w})",
        "peak": f"max_over_time({L.GPU_UTIL}{sel}{w})",
        "fb_min": f"min_over_time({L.FB_USED}{sel}{w})",
        "head": f"count_over_time({L.GPU_UTIL}{sel}[{EDGE_MIN}m] offset {head_offset}m)",
        "recent": f"count_over_time({L.GPU_UTIL}{sel}[{EDGE_MIN}m])",
    }
    return " or ".join(
        f'label_replace({expr}, "{STAT}", "{name}", "", "")' for name, expr in stats.items()
    )


def measure(
    prom: Prometheus, windows: dict[int, list[Key]], at: float
) -> dict[Key, list[GpuSeries]]:
    """Every GPU series of every cluster, by cluster (a cluster with none maps to [])."""
    out: dict[Key, list[GpuSeries]] = {}
    for window, keys in sorted(windows.items()):
        wanted = set(keys)
        found: dict[Key, dict[tuple[str, str], GpuSeries]] = defaultdict(dict)
        for s in prom.query(batch_expr(keys, window), at):
            m = s.labels
            key = Key(m.get(L.CLUSTER, ""), m.get(L.ENVIRONMENT, ""), m.get(L.PURPOSE, ""))
            if key not in wanted:  # the regexes match across clusters; keep exact triples
                continue
            ident = (m.get(L.NODE, ""), m.get(L.GPU, m.get("UUID", "")))
            g = found[key].setdefault(ident, GpuSeries(*ident))
            stat = m.get(STAT)
            if stat in ("avg", "peak", "fb_min"):
                setattr(g, stat, s.value)
            elif stat in ("head", "recent"):
                setattr(g, stat, s.value > 0)
        for key in keys:
            out[key] = sorted(found.get(key, {}).values(), key=lambda g: (g.node, g.gpu))
    return out
