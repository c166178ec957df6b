"""heal's pure rules on simulated clusters (five nodes and more): a node's verdict and action
from its evidence, the breaker, the out-of-service budget, and the cases that must never lead
to an action: a healthy node, a node without telemetry, notify_only, a tripped breaker."""

from __future__ import annotations

import pytest

from rackform.blueprint.schema.health import HealthPolicy
from rackform.blueprint.schema.rollout import budget as budget_of
from rackform.blueprint.schema.rollout import parse_budget
from rackform.blueprint.schema.sections import LifecycleSpec
from rackform.health.verdict import Evidence, NodeHealth, judge_cluster


def ev(action: str, fault: str = "xid") -> Evidence:
    return Evidence(fault, f"{fault} seen", action)


def cluster(*evidence: list[Evidence] | None, seen: bool = True) -> list[NodeHealth]:
    """gpu-node-01.. with the given evidence (None: no telemetry at all)."""
    return [
        NodeHealth(f"gpu-node-{i:02d}", "h100-pool", seen=e is not None and seen, evidence=e or [])
        for i, e in enumerate(evidence, 1)
    ]


def acting(nodes: list[NodeHealth]) -> list[str]:
    return [n.node for n in nodes if n.acts]


def test_healthy_unknown_suspect_failed():
    nodes = cluster([], None, [ev("monitor")], [ev("monitor"), ev("reboot"), ev("reset")], [])
    assert [n.verdict for n in nodes] == ["healthy", "unknown", "suspect", "failed", "healthy"]
    assert [n.action for n in nodes] == ["none", "none", "monitor", "reboot", "none"]
    judge_cluster(nodes, HealthPolicy())
    assert acting(nodes) == ["gpu-node-04"]


def test_a_healthy_cluster_gets_no_action_at_all():
    nodes = cluster(*([[]] * 8))
    b = judge_cluster(nodes, HealthPolicy(), budget=8)
    assert not b.tripped and acting(nodes) == [] and all(n.action == "none" for n in nodes)


def test_a_node_without_telemetry_is_never_acted_on_whatever_else_is_said():
    """Evidence from before the node went silent does not make it actionable: unknown wins."""
    nodes = [NodeHealth("gpu-node-01", "g", seen=False, evidence=[ev("replace")]), *cluster([], [])]
    judge_cluster(nodes, HealthPolicy(), budget=3)
    assert nodes[0].verdict == "unknown" and nodes[0].action == "none" and acting(nodes) == []


def test_the_budget_takes_the_most_disruptive_first_and_names_the_ones_that_wait():
    nodes = cluster([ev("drain")], [ev("reboot")], [], [ev("reset")], [], [], [], [], [], [])
    judge_cluster(nodes, HealthPolicy())  # 10 nodes: budget max(1, 10%) = 1
    assert acting(nodes) == ["gpu-node-02"]
    waiting = {n.node: n.waits for n in nodes if n.waits}
    assert set(waiting) == {"gpu-node-01", "gpu-node-04"}
    assert all("out-of-service budget (1 of 10 nodes) is used" in w for w in waiting.values())


def test_nodes_already_out_of_service_use_the_budget():
    """A node a person drained counts: with a budget of 2 and one out, one more may go."""
    nodes = cluster([], [ev("reboot")], [ev("reboot")], [], [], [], [])
    nodes[0].out_of_service = True
    judge_cluster(nodes, HealthPolicy(), budget=2)
    assert acting(nodes) == ["gpu-node-02"] and "budget (2 of 7 nodes)" in nodes[2].waits


@pytest.mark.parametrize(
    ("budget", "nodes", "free"),
    [(None, 5, 1), (None, 25, 2), (None, 100, 10), ("25%", 8, 2), ("1%", 8, 1), (3, 5, 3)],
)
def test_the_budget(budget, nodes, free):
    assert budget_of(parse_budget(budget), nodes) == free


@pytest.mark.parametrize("bad", [0, -1, "0%", "101%", "ten", "10 %%", "%"])
def test_a_budget_that_is_not_one_is_refused(bad):
    with pytest.raises(ValueError, match="max_out_of_service"):
        LifecycleSpec(max_out_of_service=bad)


def test_the_breaker_trips_when_more_than_half_look_unhealthy_and_acts_on_none():
    nodes = cluster([ev("reboot")], [ev("monitor")], [ev("reset")], [], [])
    b = judge_cluster(nodes, HealthPolicy(), budget=5)
    assert b.tripped and b.unhealthy == 3 and "3 of 5 nodes look unhealthy" in b.why
    assert acting(nodes) == []
    assert {n.waits for n in nodes if n.action not in ("none", "monitor")} == {
        "the breaker is tripped"
    }


def test_the_breaker_holds_at_half_and_for_a_single_node():
    half = cluster([ev("reboot")], [ev("reboot")], [], [])
    assert not judge_cluster(half, HealthPolicy(), budget=4).tripped
    assert acting(half) == ["gpu-node-01", "gpu-node-02"]
    alone = cluster([ev("reboot")])  # one node of one: more than half, but not more than one
    assert not judge_cluster(alone, HealthPolicy()).tripped and acting(alone) == ["gpu-node-01"]


def test_unknown_nodes_do_not_trip_the_breaker():
    """Telemetry gone from most nodes is no evidence against them (nor for an action)."""
    nodes = cluster(None, None, None, None, [ev("reboot")])
    assert not judge_cluster(nodes, HealthPolicy()).tripped and acting(nodes) == ["gpu-node-05"]


def test_notify_only_judges_and_never_acts():
    nodes = cluster([ev("replace")], [], [], [], [])
    judge_cluster(nodes, HealthPolicy(notify_only=True))
    assert nodes[0].verdict == "failed" and nodes[0].action == "replace"
    assert acting(nodes) == [] and nodes[0].waits == "the health policy is notify_only"


def test_a_monitor_action_takes_nothing_out_of_service():
    nodes = cluster([ev("monitor")], [ev("monitor", "performance")], [], [], [])
    judge_cluster(nodes, HealthPolicy())
    assert acting(nodes) == [] and not any(n.waits for n in nodes)
