"""What Prometheus says about each GPU of each cluster over its idle window (idleness says which
statistics and why): one query per distinct window for every cluster at
once (never one per cluster or node), then, only for the clusters whose GPUs fall short of
full coverage, one range query each that says where the gaps lie."""

from __future__ import annotations

from collections import defaultdict

from rackform.reap.idleness import (
    GAP_TOLERANCE_SCRAPES,
    SCRAPES_PER_BUCKET,
    STAT,
    GpuStats,
    Window,
    batch,
    before,
    presence,
)
from rackform.telemetry import labels as L
from rackform.telemetry.labels import Key
from rackform.telemetry.prometheus import Prometheus


def selector(keys: list[Key]) -> str:
    """Matchers for these clusters: exact for one, alternations for a batch (the regexes match
    across clusters, so a batch's answers are filtered to exact triples)."""
    return ",".join(
        (
            L.one_of(L.CLUSTER, [k.cluster for k in keys]),
            L.one_of(L.ENVIRONMENT, [k.environment for k in keys]),
            L.one_of(L.PURPOSE, [k.purpose for k in keys]),
        )
    )


def measure(
    prom: Prometheus, windows: dict[Window, list[Key]], at: float
) -> dict[Key, list[GpuStats]]:
    """Every GPU of every cluster, by cluster (a cluster with none maps to [])."""
    out: dict[Key, list[GpuStats]] = {}
    for window, keys in sorted(windows.items(), key=lambda kv: (kv[0].minutes, kv[0].scrape_s)):
        wanted = set(keys)
        found: dict[Key, dict[tuple[str, str], GpuStats]] = defaultdict(dict)
        heartbeats: dict[tuple[Key, str], float] = {}
        for s in prom.query(batch(selector(keys), window), at):
            m, stat = s.labels, s.labels.get(STAT)
            key = Key(m.get(L.CLUSTER, ""), m.get(L.ENVIRONMENT, ""), m.get(L.PURPOSE, ""))
            if key not in wanted:  # the regexes match across clusters; keep exact triples
                continue
            if stat == "hb_last":
                heartbeats[(key, m.get(L.NODE, ""))] = s.value
                continue
            ident = (m.get(L.NODE, ""), m.get(L.GPU, ""))
            g = found[key].setdefault(ident, GpuStats(*ident))
            if stat in ("peak", "fb_min", "fb_max", "sum"):
                setattr(g, stat, s.value)
            elif stat == "samples":
                g.samples = int(s.value)
        for key in keys:
            gpus = sorted(found.get(key, {}).values(), key=lambda g: (g.node, g.gpu))
            for g in gpus:
                g.expected = window.samples
                g.short = max(window.samples - g.samples, 0)
                g.hb_last = heartbeats.get((key, g.node))
            out[key] = gpus
        every: list[float] | None = None  # the window's buckets: asked once, if any is short
        for key in keys:
            short = [g for g in out[key] if g.short > GAP_TOLERANCE_SCRAPES or g.overlapping]
            if short:
                if every is None:
                    found_steps = prom.query_range(f"vector(1){window.subquery}", at)
                    every = [t for t, _ in found_steps[0][1]] if found_steps else []
                _locate_gaps(prom, key, window, at, short, every)
    return out


def _locate_gaps(
    prom: Prometheus, key: Key, w: Window, at: float, short: list[GpuStats], every: list[float]
) -> None:
    """Each short (or overlapping) GPU's `gaps`, from the buckets that hold samples and those
    that exist; an overlapping GPU's shortfall is counted from its empty buckets."""
    have: dict[tuple[str, str], set[float]] = {}
    for metric, points in prom.query_range(presence(selector([key]), w), at):
        have[(metric.get(L.NODE, ""), metric.get(L.GPU, ""))] = {t for t, _ in points}
    earlier = {
        (s.labels.get(L.NODE, ""), s.labels.get(L.GPU, "")): int(s.value)
        for s in prom.query(before(selector([key]), w), at)
    }
    for g in short:
        g.before = earlier.get((g.node, g.gpu), 0)
        present = have.get((g.node, g.gpu), set())
        gaps: list[tuple[float, float]] = []
        for t in every:
            if t in present:
                continue
            start = t - w.bucket_s
            if gaps and gaps[-1][1] == start:
                gaps[-1] = (gaps[-1][0], t)
            else:
                gaps.append((start, t))
        g.gaps = tuple(gaps)
        if g.overlapping:
            empty = len(every) - len(present & set(every))
            g.short = empty * SCRAPES_PER_BUCKET
