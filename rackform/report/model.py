"""What one cluster's report shows, gathered before anything is drawn: its measured failures
(`lifecycle.repairs`), its utilization and idle GPU-hours (`report.utilization`), its jobs'
cost (`scheduler.usage`) and its goodput (GPU-hours lost by cause), each None where its input
was not given, with the notes that say why or what was skipped."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rackform.lifecycle.repairs import Reliability
from rackform.scheduler.usage import Usage
from rackform.telemetry.labels import Key


@dataclass(frozen=True)
class Utilization:
    """Hourly: the cluster's mean GPU utilization (percent) and its idle GPU-hours (GPUs below
    the idle policy's level, each sample counted), at each hour's end (unix time)."""

    util: tuple[tuple[float, float], ...]
    idle: tuple[tuple[float, float], ...]
    target_pct: float
    idle_below_pct: float

    @property
    def mean_pct(self) -> float | None:
        return sum(v for _, v in self.util) / len(self.util) if self.util else None

    @property
    def idle_gpu_hours(self) -> float:
        return sum(v for _, v in self.idle)


@dataclass(frozen=True)
class Goodput:
    """GPU-hours lost by cause (`rackform goodput`'s `lost_by_cause`, or measured), and the
    GPU-hours paid for where known: goodput is what was not lost."""

    lost: Mapping[str, float]
    paid_gpu_hours: float | None = None

    @property
    def fraction(self) -> float | None:
        if not self.paid_gpu_hours:
            return None
        return 1 - sum(self.lost.values()) / self.paid_gpu_hours


@dataclass
class ClusterReport:
    key: Key
    stack: str
    gpus: int
    reliability: Reliability
    utilization: Utilization | None = None
    usage: Usage | None = None
    goodput: Goodput | None = None
    notes: list[str] = field(default_factory=list)


class GoodputError(ValueError):
    """A goodput file that cannot be read: names the file and the entry."""


def _hours(v: object, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise GoodputError(f"{where}: {v!r} is not a number of GPU-hours (0 or more)")
    return float(v)


def _simulated(path: Path, doc: dict, mode: str) -> dict:
    """What `rackform goodput --json` writes, as the file below: each cluster's scenario (its
    stack) with the GPU-hours lost by cause in the simulation's `mode` and the GPU-hours paid."""
    out = {}
    for i, c in enumerate(doc["clusters"] if isinstance(doc["clusters"], list) else [None]):
        where = f"{path}: clusters[{i}]"
        if not isinstance(c, dict) or not isinstance(c.get("modes"), dict):
            raise GoodputError(f"{where}: not a cluster of `rackform goodput --json`")
        if mode not in c["modes"]:
            raise GoodputError(
                f"{where}: no {mode!r} mode (it has {', '.join(map(str, c['modes']))})"
            )
        got = c["modes"][mode]
        lost = got.get("lost_gpu_hours") if isinstance(got, dict) else None
        out[str(c.get("scenario"))] = {"lost": lost, "paid_gpu_hours": c.get("paid_gpu_hours")}
    return out


def load_goodput(path: Path, mode: str = "elastic") -> dict[str, Goodput]:
    """A goodput file (YAML or JSON) by stack: `{<stack>: {lost: {<cause>: GPU-hours},
    paid_gpu_hours: N}}`, where `paid_gpu_hours` may be left out; or what `rackform goodput
    --json` writes, read in the simulation's `mode` (`elastic` or `requeue`)."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GoodputError(f"{path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise GoodputError(f"{path}: not YAML or JSON ({exc.__class__.__name__})") from None
    if isinstance(doc, dict) and set(doc) == {"clusters"}:
        doc = _simulated(path, doc, mode)
    if not isinstance(doc, dict):
        raise GoodputError(f"{path}: give a mapping of stack -> {{lost: ..., paid_gpu_hours: ...}}")
    out = {}
    for stack, entry in doc.items():
        where = f"{path}: {json.dumps(str(stack))}"
        if not isinstance(entry, dict) or not isinstance(entry.get("lost"), dict):
            raise GoodputError(f"{where}: give `lost`, a mapping of cause -> GPU-hours")
        unknown = set(entry) - {"lost", "paid_gpu_hours"}
        if unknown:
            raise GoodputError(f"{where}: unknown key {sorted(map(str, unknown))[0]!r}")
        lost = {str(c): _hours(v, f"{where}: lost: {c}") for c, v in entry["lost"].items()}
        paid = entry.get("paid_gpu_hours")
        paid = None if paid is None else _hours(paid, f"{where}: paid_gpu_hours")
        if paid is not None and sum(lost.values()) > paid:
            raise GoodputError(
                f"{where}: {sum(lost.values()):g} GPU-hours lost is more than the {paid:g} paid for"
            )
        out[str(stack)] = Goodput(lost, paid)
    return out
