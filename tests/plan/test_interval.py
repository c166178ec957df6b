"""The checkpoint interval's rules against numbers worked by hand, their edges, and the
catalog's failure rate against the Llama 3 paper's counts."""

from __future__ import annotations

import math

import pytest

from rackform.catalog.preflight import load_preflight_figures
from rackform.plan.interval import (
    HOUR,
    FailureRate,
    daly,
    exponential_goodput,
    first_order_goodput,
    interval,
    young,
)


def rate(per_node_hour: float) -> FailureRate:
    return FailureRate(per_node_hour, "test", 0.75, 0.15, 0.10)


def test_young_and_daly_by_hand():
    # C = 10 s, M = 10,000 s: Young sqrt(2 x 10 x 10,000) = sqrt(200,000) = 447.214 s.
    assert young(10, 10_000) == pytest.approx(447.2136, abs=1e-4)
    # Daly: x = C / 2M = 0.0005, sqrt(x) = 0.022361; 447.2136 x (1 + 0.022361/3 + 0.0005/9)
    # = 447.2136 x 1.0075091 = 450.5718; minus C = 440.5718 s.
    assert daly(10, 10_000) == pytest.approx(440.5718, abs=1e-3)


def test_first_order_goodput_by_hand():
    # tau 600, C 60, R 120, M 36,000: 600/660 x (1 - (120 + 330) / 36,000) = 0.90909 x 0.9875.
    assert first_order_goodput(600, 60, 120, 36_000) == pytest.approx(0.897727, abs=1e-6)
    # Daly's exponential expectation: 600 / (36,000 e^(120/36,000) (e^(660/36,000) - 1)).
    assert exponential_goodput(600, 60, 120, 36_000) == pytest.approx(0.897785, abs=1e-6)


def test_the_best_interval_loses_least():
    c, r, m = 30.0, 300.0, 12 * HOUR
    best = daly(c, m)
    g = first_order_goodput(best, c, r, m)
    for tau in (best / 2, best * 0.9, best * 1.1, best * 2):
        assert first_order_goodput(tau, c, r, m) < g
    # Where failures are rare within an interval the two models agree closely.
    assert exponential_goodput(best, c, r, m) == pytest.approx(g, abs=2e-3)


def test_mtbf_shorter_than_a_checkpoint():
    # C = 600 s, the job's MTBF 300 s: Daly checkpoints as rarely as failures come (M),
    # and the first order, past its range, floors at 0 rather than going negative.
    assert daly(600, 300) == 300
    assert first_order_goodput(300, 600, 60, 300) == 0
    assert 0 < exponential_goodput(300, 600, 60, 300) < 0.2


def test_no_failures_and_no_blocking():
    none = rate(0.0)
    assert math.isinf(none.job_mtbf_s(512))
    iv = interval(10, "test", 10, 512, none, 1800)
    assert iv.best_s == 1800  # any interval keeps all the first order counts: the declared
    assert iv.goodput_best == pytest.approx(1800 / 1810)
    assert iv.loss_points == pytest.approx(0)
    assert math.isinf(daly(0, 3600))  # a checkpoint that blocks nothing
    undeclared = interval(10, "test", 10, 4, none, None)
    assert undeclared.best_s == HOUR and undeclared.goodput_declared is None


def test_declared_against_best_in_points():
    # 512 nodes at 1e-4 per node-hour: the job fails every 1 / 0.0512 h = 19.53 h = 70,312.5 s.
    iv = interval(20, "test", 20, 512, rate(1e-4), 3600)
    assert iv.job_mtbf_s == pytest.approx(70_312.5)
    assert iv.young_s == pytest.approx(math.sqrt(2 * 20 * 70_312.5))  # 1,677 s
    declared = 3600 / 3620 * (1 - (20 + 1810) / 70_312.5)
    assert iv.goodput_declared == pytest.approx(declared)
    assert iv.loss_points == pytest.approx((iv.goodput_best - declared) * 100)
    # Daly's 1,663.74 s: 1,663.74 / 1,683.74 x (1 - (20 + 841.87) / 70,312.5) = 0.988122 x
    # 0.987743 = 0.976010, against 0.968592 declared: 0.74 of a point (no finding under 1).
    assert iv.best_s == pytest.approx(1663.744, abs=1e-3)
    assert iv.goodput_best == pytest.approx(0.976010, abs=1e-6)
    assert iv.loss_points == pytest.approx(0.7417, abs=1e-4) and iv.first_order_holds


def test_the_catalog_rate_is_the_llama3_papers():
    f = load_preflight_figures().failures
    # 419 unexpected interruptions in 54 days on 2,048 nodes of 8 H100s.
    assert f.per_node_hour.value * 2048 * 54 * 24 == pytest.approx(419, rel=1e-4)
    assert f.per_node_hour.source.url == "https://arxiv.org/abs/2407.21783"
    shares = f.hardware_share.value + f.software_share.value + f.network_share.value
    assert shares == pytest.approx(1, abs=0.002)
    # About one failure every three hours on the paper's 16,384 GPUs.
    assert rate(f.per_node_hour.value).job_mtbf_s(2048) / HOUR == pytest.approx(3.09, abs=0.01)
