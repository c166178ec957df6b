"""Performance outliers over simulated nodes' reports (the reports' shape is the smoke job's and
the host checks' own): each node against its node group's median, zero findings on a healthy
group with run-to-run jitter, and the inputs that try to fool it (a group of one, a missing or
broken figure, two groups at different speeds, a slow node among two)."""

from __future__ import annotations

import math
import random

import pytest

from rackform.acceptance.cluster import merge_reports
from rackform.acceptance.outliers import node_checks
from rackform.evidence.verdict import verdict


def report(matmul=None, h2d=None, bus=None, storage=None) -> dict:
    perf = {"matmul_tflops": matmul, "h2d_gbps": h2d, "local_busbw_gbps": bus, "devices": 8}
    checks = []
    if storage is not None:  # as the host checks report it: measured even with no threshold
        checks.append({"name": "storage_write_ceiling", "status": "not-run", "measured": storage,
                       "expected": None, "unit": "GB/s", "detail": "no threshold set"})  # fmt: skip
    return {"checks": checks, "metrics": {"node_perf": perf}}


HEALTHY = {"matmul": 700.0, "h2d": 50.0, "bus": 460.0, "storage": 24.0}
NODES = [f"hgx-h100-{i:02d}" for i in range(1, 7)]  # six nodes of one group, hyphenated names


def jittered(seed: int, **slow: float) -> dict[str, dict]:
    """Six nodes within 5% of each other (run-to-run noise), `slow` scaling one figure of the
    third node."""
    rng = random.Random(seed)
    out = {}
    for n in NODES:
        figs = {k: v * rng.uniform(0.95, 1.05) for k, v in HEALTHY.items()}
        if n == NODES[2]:
            figs = {k: v * slow.get(k, 1.0) for k, v in figs.items()}
        out[n] = report(**figs)
    return out


def by_node(checks) -> dict[str, dict]:
    return {c["node"]: c for c in checks}


@pytest.mark.parametrize("seed", range(20))
def test_a_healthy_group_with_jitter_finds_nothing(seed):
    got = by_node(node_checks(jittered(seed), dict.fromkeys(NODES, "hgx-h100")))
    assert {c["status"] for c in got.values()} == {"pass"}, got
    assert all(c["measured"] >= 0.9 for c in got.values())


@pytest.mark.parametrize(
    ("slow", "named"),
    [
        ({"matmul": 0.6}, "matmul"),  # a GPU trained down, or clocks held
        ({"h2d": 0.5}, "host to device"),  # a PCIe link at half width
        ({"bus": 0.55}, "all-reduce within the node"),  # NVLink down to PCIe
        ({"storage": 0.4}, "checkpoint array write"),  # a tired drive in the array
    ],
)
def test_one_slow_figure_names_the_node_and_only_what_is_low(slow, named):
    got = by_node(node_checks(jittered(7, **slow), dict.fromkeys(NODES, "hgx-h100")))
    bad = [n for n, c in got.items() if c["status"] == "fail"]
    assert bad == [NODES[2]], got
    detail = got[NODES[2]]["detail"]
    assert (
        detail.startswith("slower than its group: " + named) and detail.count(" x the median") == 1
    )
    assert "of node group hgx-h100" in detail and "6 nodes" in detail
    assert got[NODES[2]]["measured"] < 0.8 and got[NODES[2]]["expected"] == 0.8


def test_two_groups_are_compared_each_with_its_own():
    # A100s measure less than H100s: nobody is slow within their own group.
    reports = {f"h{i}": report(matmul=700 + i, storage=24) for i in range(3)}
    reports |= {f"a{i}": report(matmul=230 + i, storage=10) for i in range(3)}
    groups = {**{f"h{i}": "h100" for i in range(3)}, **{f"a{i}": "a100" for i in range(3)}}
    got = node_checks(reports, groups)
    assert {c["status"] for c in got} == {"pass"}
    # Put together, the A100s would all look slow: the grouping is what keeps them apart.
    together = node_checks(reports, dict.fromkeys(groups, "all"))
    assert sorted(c["node"] for c in together if c["status"] == "fail") == ["a0", "a1", "a2"]


def test_a_node_among_two_is_named_when_half_as_fast():
    got = by_node(
        node_checks({"n1": report(matmul=100), "n2": report(matmul=50)}, {"n1": "g", "n2": "g"})
    )
    assert (got["n1"]["status"], got["n2"]["status"]) == ("pass", "fail")
    assert got["n2"]["measured"] == pytest.approx(50 / 75, abs=1e-3)


def test_at_the_fraction_passes_below_it_fails():
    groups = dict.fromkeys(("a", "b", "c"), "g")
    at = node_checks(
        {"a": report(matmul=100), "b": report(matmul=100), "c": report(matmul=80)}, groups
    )
    assert by_node(at)["c"]["status"] == "pass"
    below = node_checks(
        {"a": report(matmul=100), "b": report(matmul=100), "c": report(matmul=79.9)}, groups
    )
    assert by_node(below)["c"]["status"] == "fail"
    assert by_node(node_checks({"a": report(matmul=100), "b": report(matmul=100),
                                "c": report(matmul=79.9)}, groups, 0.7))["c"]["status"] == "pass"  # fmt: skip


@pytest.mark.parametrize("broken", [None, 0, -5, math.nan, math.inf, "fast", True])
def test_a_broken_figure_is_compared_with_nothing_and_spoils_nothing(broken):
    reports = {n: report(matmul=700, storage=24) for n in NODES}
    reports[NODES[0]] = report(matmul=broken, storage=24)
    got = by_node(node_checks(reports, dict.fromkeys(NODES, "g")))
    assert {c["status"] for c in got.values()} == {"pass"}
    assert (
        "matmul" not in got[NODES[0]]["detail"]
        and "checkpoint array write" in got[NODES[0]]["detail"]
    )
    assert "matmul" in got[NODES[1]]["detail"] and "5 nodes" in got[NODES[1]]["detail"]


def test_the_only_node_of_its_group_or_figures_nobody_shares_are_not_run():
    got = by_node(node_checks({"solo": report(matmul=700), "n1": report(matmul=700),
                               "n2": report(storage=20)}, {"solo": "a", "n1": "b", "n2": "b"}))  # fmt: skip
    assert got["solo"]["status"] == "not-run" and "only node of its group" in got["solo"]["detail"]
    assert got["n1"]["status"] == got["n2"]["status"] == "not-run"
    assert "no figure of its own that another node" in got["n1"]["detail"]
    # A node with no self-measure at all (its job died early) still has its storage probe.
    assert (
        node_checks({"x": {"checks": []}, "y": {"checks": []}}, {"x": "g", "y": "g"})[0]["status"]
        == "not-run"
    )


def test_the_merged_report_names_the_slow_node_and_fails_the_verdict():
    reports = jittered(3, matmul=0.5)
    groups = dict.fromkeys(NODES, "hgx-h100")
    merged = merge_reports(NODES, reports, 0, groups)
    perf = [c for c in merged["checks"] if c["name"].endswith("/node_perf")]
    assert [c["name"] for c in perf] == [f"{n}/node_perf" for n in NODES]
    ok, why = verdict(merged)
    assert not ok and f"{NODES[2]}/node_perf" in why, why
    # Without the groups (a caller that knows none) nothing is compared.
    assert not [c for c in merge_reports(NODES, reports, 0)["checks"] if "node_perf" in c["name"]]
