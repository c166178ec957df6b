"""The checkpoint interval that loses least, and the goodput around it: pure arithmetic.

C is what one checkpoint blocks training for (the whole write when it is synchronous; only
the copy off the GPUs when the write runs beside training), R what a restart costs before
training goes on (reading the checkpoint back), M the job's mean time between failures (a
node's MTBF / the job's nodes: any node's failure stops a synchronous job). All in seconds.

- Young (1974): the interval tau = sqrt(2 C M) minimizes the first-order loss C / tau (time
  spent checkpointing) + tau / (2 M) (half an interval of work redone per failure).
- Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart
  dumps": tau = sqrt(2 C M) [1 + sqrt(C / 2M) / 3 + (C / 2M) / 9] - C for C < 2M, else M.
- First-order goodput at an interval: the share of wall time that is training kept,
  tau / (tau + C) x (1 - (R + (tau + C) / 2) / M): a checkpoint's C per interval, and per
  failure a restart and half a segment redone. Valid while failures are rare within a
  segment (M well above tau + C + R); `exponential_goodput` is Daly's exact expectation for
  exponential failures (failures during a restart or a checkpoint included), which the
  simulation is checked against where the first order stops holding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOUR = 3600.0
# First-order theory is read as holding while the job's MTBF is at least this many segments.
FIRST_ORDER_SEGMENTS = 10.0


def young(c: float, m: float) -> float:
    """Young's interval sqrt(2 C M)."""
    return math.sqrt(2.0 * c * m)


def daly(c: float, m: float) -> float:
    """Daly's higher-order interval; M itself where C >= 2M (a checkpoint as long as the time
    between failures: checkpoint as rarely as failures come)."""
    if c <= 0:
        return math.inf  # nothing blocks: checkpoint as often as wanted
    if c >= 2.0 * m:
        return m
    x = c / (2.0 * m)
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - c


def first_order_goodput(tau: float, c: float, r: float, m: float) -> float:
    """The first-order share of wall time that is training kept (0 where it goes below)."""
    if math.isinf(m):
        return tau / (tau + c)
    g = tau / (tau + c) * (1.0 - (r + (tau + c) / 2.0) / m)
    return max(0.0, g)


def exponential_goodput(tau: float, c: float, r: float, m: float) -> float:
    """Daly's expectation for exponential failures: work tau per segment, each segment
    (tau + C) retried from its start on a failure, each retry after a restart R that a failure
    also interrupts: T_wall / T_work = M e^(R/M) (e^((tau+C)/M) - 1) / tau."""
    if math.isinf(m):
        return tau / (tau + c)
    return tau / (m * math.exp(r / m) * math.expm1((tau + c) / m))


@dataclass(frozen=True)
class FailureRate:
    """Failures per node-hour in service, and where the figure came from."""

    per_node_hour: float
    source: str
    hardware: float  # shares by class (they sum to 1)
    software: float
    network: float
    measured: bool = False  # from the cluster's own audit log
    failures: int | None = None  # the measurement's basis, where measured
    node_hours: float | None = None

    def job_mtbf_s(self, nodes: int) -> float:
        rate = self.per_node_hour * max(nodes, 1)
        return math.inf if rate <= 0 else HOUR / rate


@dataclass(frozen=True)
class Measured:
    """What a cluster measured of itself, where it has: its checkpoint write speed (the slowest
    node's, GB/s, from its last validation report's `checkpoint_write`) and its failure rate
    (from heal's audit log). None: not measured, so compile estimates C from the tier's speed
    and takes the catalog's rate."""

    checkpoint_gbps: float | None = None
    checkpoint_source: str = ""
    failures: FailureRate | None = None

    @property
    def empty(self) -> bool:
        return self.checkpoint_gbps is None and self.failures is None


@dataclass(frozen=True)
class CheckpointInterval:
    """The declared interval against the best one, for one training plan."""

    c_s: float  # one checkpoint's blocking time
    c_source: str
    r_s: float  # a restart's cost (the checkpoint read back)
    nodes: int
    rate: FailureRate
    declared_s: float | None  # workload.checkpoint_interval_min, in seconds
    young_s: float
    best_s: float  # Daly's
    goodput_best: float
    goodput_declared: float | None
    asynchronous: bool = False

    @property
    def job_mtbf_s(self) -> float:
        return self.rate.job_mtbf_s(self.nodes)

    @property
    def loss_points(self) -> float | None:
        """Goodput points the declared interval loses against the best (None: none declared)."""
        if self.goodput_declared is None:
            return None
        return (self.goodput_best - self.goodput_declared) * 100.0

    @property
    def first_order_holds(self) -> bool:
        """Failures rare within a segment: the job's MTBF at least FIRST_ORDER_SEGMENTS
        segments (the declared one, else the best)."""
        seg = (self.declared_s or self.best_s) + self.c_s + self.r_s
        return self.job_mtbf_s >= FIRST_ORDER_SEGMENTS * seg

    def as_json(self) -> dict:
        return {
            "checkpoint_blocking_s": round(self.c_s, 3),
            "checkpoint_source": self.c_source,
            "asynchronous": self.asynchronous,
            "restart_s": round(self.r_s, 3),
            "nodes": self.nodes,
            "failures_per_node_hour": self.rate.per_node_hour,
            "failure_rate_source": self.rate.source,
            "job_mtbf_h": None if math.isinf(self.job_mtbf_s) else round(self.job_mtbf_s / HOUR, 3),
            "declared_min": None if self.declared_s is None else round(self.declared_s / 60, 3),
            "young_min": _minutes(self.young_s),
            "best_min": _minutes(self.best_s),
            "goodput_declared": _share(self.goodput_declared),
            "goodput_best": _share(self.goodput_best),
            "first_order_holds": self.first_order_holds,
        }


def _minutes(s: float) -> float | None:
    return None if math.isinf(s) else round(s / 60, 3)


def _share(g: float | None) -> float | None:
    return None if g is None else round(g, 5)


def interval(
    c_s: float,
    c_source: str,
    r_s: float,
    nodes: int,
    rate: FailureRate,
    declared_s: float | None,
    asynchronous: bool = False,
) -> CheckpointInterval:
    """The best interval (Daly's) and the first-order goodput at it and at the declared one."""
    m = rate.job_mtbf_s(nodes)
    best = daly(c_s, m)
    young_s = young(c_s, m) if not math.isinf(m) else math.inf
    if math.isinf(best):
        # No failures, or a checkpoint that blocks nothing: any interval keeps everything
        # the first order counts; the declared one (else an hour) stands for it.
        best = declared_s or HOUR
    g_best = first_order_goodput(best, c_s, r_s, m)
    g_declared = None if declared_s is None else first_order_goodput(declared_s, c_s, r_s, m)
    return CheckpointInterval(
        c_s, c_source, r_s, nodes, rate, declared_s, young_s, best, g_best, g_declared,
        asynchronous,
    )  # fmt: skip
