"""Prices as values: a cost line with its source, a run, the utilization gap, a whole cost. The
targets' compilers price their own capacity with these; `cost` assembles them with the parts every
target shares."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rackform.catalog import Figure

UNPRICED = "no total"


def src(*figs: Figure) -> str:
    return ", ".join(dict.fromkeys(f"{f.source.key} ({f.source.date})" for f in figs))


@dataclass(frozen=True)
class Line:
    item: str
    usd_per_hour: float
    usd_per_month: float
    source: str


@dataclass(frozen=True)
class RunAt:
    utilization_pct: float
    hours: float
    usd: float | None


@dataclass(frozen=True)
class Run:
    tokens_b: float
    flops: float
    gpus: int
    peak_pflops: float  # the cluster's dense BF16 peak
    mfu_pct: float
    at: tuple[RunAt, ...]
    source: str


@dataclass(frozen=True)
class Gap:
    expected_pct: float
    target_pct: float
    usd_per_month: float | None  # idle capacity paid for, against the target
    run_usd: float | None  # extra cost of the run at expected vs target utilization


@dataclass(frozen=True)
class TokenCost:
    """What a serving node group's output tokens cost: the node's share of the cluster's hourly
    cost (by its GPUs) over the tokens it generates in an hour."""

    group: str
    usd_per_node_hour: float
    tokens_per_s: float  # the node's decode rate: on paper, the HBM-bandwidth bound
    usd_per_million_output_tokens: float
    basis: str  # what the rate is: "on paper (HBM bound)" or the measurement's


def token_cost(group: str, usd_per_node_hour: float, tokens_per_s: float, basis: str) -> TokenCost:
    per_million = usd_per_node_hour / (tokens_per_s * 3600) * 1e6
    return TokenCost(group, usd_per_node_hour, tokens_per_s, per_million, basis)


@dataclass(frozen=True)
class Cost:
    basis: str
    currency: str
    hours_per_month: float
    compute: tuple[Line, ...]
    storage: Line | None
    usd_per_hour: float | None  # compute + storage
    usd_per_month: float | None  # compute + storage
    spot_usd_per_hour_range: tuple[float, float] | None
    run: Run | None
    utilization: Gap | None
    notes: tuple[str, ...]
    # Each serving node group's cost per million output tokens at its decode rate on paper.
    tokens: tuple[TokenCost, ...] = ()

    def as_dict(self) -> dict:
        """JSON-ready: money and hours to the cent, nothing else changed."""
        return _rounded(asdict(self))


def _rounded(v):
    if isinstance(v, float):
        return round(v, 2) if abs(v) < 1e15 else float(f"{v:.6g}")
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_rounded(x) for x in v]
    return v


@dataclass(frozen=True)
class TargetCost:
    """What a target's compiler prices: the capacity, by line, and how it is bought."""

    basis: str
    lines: tuple[Line, ...]
    spot_usd_per_hour_range: tuple[float, float] | None = None
    notes: tuple[str, ...] = ()
