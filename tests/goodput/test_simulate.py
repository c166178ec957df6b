"""The goodput simulation against theory where theory holds, and where it does not (many
failures per interval, the budget used, heal giving a node to a person) what it shows."""

from __future__ import annotations

import statistics

import pytest

from rackform.blueprint.schema.health import HealthPolicy
from rackform.goodput.report import why
from rackform.goodput.scenario import ELASTIC, REQUEUE, Assumptions, Scenario
from rackform.goodput.simulate import (
    CAUSES,
    HELD_BACK,
    REDUCED,
    TOOK_BACK,
    TRAIN,
    _World,
    lost_by_cause,
    simulate,
    theory,
)
from rackform.plan.interval import HOUR, FailureRate


def scenario(
    nodes: int = 64,
    job_mtbf_h: float = 20.0,
    shares: tuple[float, float, float] = (0.0, 1.0, 0.0),
    **kw,
) -> Scenario:
    hw, sw, net = shares
    rate = FailureRate(1 / (job_mtbf_h * nodes), "test", hw, sw, net)
    base = dict(
        name="sim-test", nodes=nodes, gpus_per_node=8, interval_s=1800.0, checkpoint_s=30.0,
        restore_s=30.0, rate=rate, policy=HealthPolicy(), budget=max(1, nodes // 10),
        min_nodes=nodes - max(1, nodes // 10), assumptions=Assumptions(),
    )  # fmt: skip
    return Scenario(**{**base, **kw})


def test_rare_failures_agree_with_first_order_theory():
    # Software faults only (the node stays well, the job restarts): exactly the model the
    # first order describes. Job MTBF 20 h, tau 30 min, C 30 s, R 300 + 30 s:
    # 1800/1830 x (1 - (330 + 915) / 72,000) = 0.983607 x 0.982708 = 0.966598.
    sc = scenario()
    th = theory(sc)
    assert th.holds and th.first_order == pytest.approx(0.966598, abs=1e-6)
    runs = [simulate(sc, REQUEUE, seed, days=30).goodput for seed in range(12)]
    # Over 12 seeds of 30 days (about 36 failures each) the mean is within 0.3 of a point.
    assert statistics.fmean(runs) == pytest.approx(th.first_order, abs=0.003)


def test_every_node_second_is_counted_once_and_seeds_repeat():
    sc = scenario(job_mtbf_h=5.0, shares=(0.75, 0.15, 0.10))
    r = simulate(sc, ELASTIC, seed=7, days=3)
    assert sum(r.node_seconds.values()) == pytest.approx(sc.nodes * 3 * 24 * HOUR)
    lost = lost_by_cause(r)
    assert set(lost) == set(CAUSES)
    kept = r.node_seconds[TRAIN] * r.gpus_per_node / HOUR
    assert sum(lost.values()) == pytest.approx(r.paid_gpu_hours - kept, abs=0.01)
    again = simulate(sc, ELASTIC, seed=7, days=3)
    assert again.node_seconds == r.node_seconds and again.repairs == r.repairs
    assert simulate(sc, ELASTIC, seed=8, days=3).node_seconds != r.node_seconds


def test_elastic_goes_on_where_requeue_waits():
    sc = scenario(job_mtbf_h=8.0, shares=(0.9, 0.0, 0.1))
    rq, el = simulate(sc, REQUEUE, 3, days=7), simulate(sc, ELASTIC, 3, days=7)
    assert rq.failures == el.failures  # the same draws: only the job's answer differs
    assert el.goodput > rq.goodput
    # Heal's rule shrank the job off most failed nodes; a failure of its first node (its batch
    # host, the rendezvous) requeued it, and then it waited for a whole allocation as well.
    assert el.decisions[REDUCED] > 5 * el.decisions[FIRST_NODE] > 0
    assert set(el.decisions) <= {REDUCED, FIRST_NODE, TOOK_BACK}
    assert lost_by_cause(rq)["waiting"] > 3 * max(lost_by_cause(el)["waiting"], 1)
    assert el.min_size < sc.nodes and rq.min_size == sc.nodes
    assert el.repairs and all(s > 0 for _, s, _ in el.repairs)
    assert any("waited for a full allocation" in w for w in why(sc, rq))
    # Spare nodes stand in for failed ones: the requeue-only job runs on the rest and waits
    # far less (the spares' idle hours are paid for and counted as waiting).
    spared = simulate(sc.with_(spares=6), REQUEUE, 3, days=7)
    assert spared.goodput > rq.goodput and spared.min_size == sc.nodes - 6


FIRST_NODE = "requeued: its first node NODE is taken (its batch script, the rendezvous)"


def test_an_elastic_job_that_may_lose_no_node_is_requeue_only_second_for_second():
    # Its minimum is every node: heal's rule requeues it on every fault that takes a node, as a
    # job without the mark is; the same draws give the same seconds in every bucket.
    sc = scenario(nodes=16, job_mtbf_h=4.0, shares=(0.7, 0.2, 0.1), budget=2, min_nodes=16)
    rq, el = simulate(sc, REQUEUE, 5, days=4), simulate(sc, ELASTIC, 5, days=4)
    assert el.node_seconds == pytest.approx(rq.node_seconds)
    below = "requeued: N of N nodes left, below its minimum N"
    assert set(el.decisions) <= {below, FIRST_NODE} and el.decisions[below] > 0
    assert el.min_size == rq.min_size == 16


def test_an_elastic_job_whose_first_node_fails_waits_for_a_whole_allocation():
    # Every failure on node 0 of a 4-node job (the others never fail): heal's rule cannot
    # shrink the job off its batch host, so it is requeued and waits, as requeue-only does;
    # a failure elsewhere would have let it go on with 3.
    rate = FailureRate(1 / 40, "test", 1.0, 0.0, 0.0)
    sc = scenario(nodes=4, rate=rate, budget=1, min_nodes=3)
    first = _World(sc, ELASTIC, 11, 2 * 24 * HOUR)
    order = ("gpu-0000", "gpu-0001", "gpu-0002", "gpu-0003")
    assert first._goes_on(order, "hardware", "gpu-0000") == ()
    assert first._goes_on(order, "hardware", "gpu-0002") == ("gpu-0000", "gpu-0001", "gpu-0003")
    assert first.lost == {"gpu-0002"}
    assert first._goes_on(("gpu-0000", "gpu-0001", "gpu-0003"), "hardware", "gpu-0001") == ()
    assert first._goes_on(order, "software", "gpu-0000") == order  # restarted in place
    assert first.res.decisions == {
        FIRST_NODE: 1,
        REDUCED: 1,
        "requeued: N of N nodes left, below its minimum N": 1,
    }


def test_a_shrunk_job_takes_its_nodes_back_once_every_one_is_in_service():
    sc = scenario(nodes=8, job_mtbf_h=3.0, shares=(1.0, 0.0, 0.0), budget=2, min_nodes=5)
    r = simulate(sc, ELASTIC, 4, days=3)
    assert r.decisions[REDUCED] > 0 and r.min_size < 8
    # Back at full size once the nodes it lost are repaired: one restart each, no work redone.
    assert 0 < r.decisions[TOOK_BACK] <= r.decisions[REDUCED]
    assert r.restarts == r.decisions.total()
    # A node repaired by a person (24 h) holds the take-back back: with remediation that fixes
    # nothing, the job runs shrunk far longer and takes its nodes back less often.
    never = sc.with_(assumptions=Assumptions(fixed_share=0.0))
    slow = simulate(never, ELASTIC, 4, days=3)
    assert slow.decisions[TOOK_BACK] < r.decisions[TOOK_BACK]


def test_many_failures_per_interval_theory_does_not_hold():
    # The job fails every 40 min with a 30 min interval: the first order is far off, Daly's
    # exponential expectation (failures during restarts and checkpoints too) is near.
    sc = scenario(job_mtbf_h=40 / 60)
    th = theory(sc)
    assert not th.holds
    g = statistics.fmean(simulate(sc, REQUEUE, s, days=4).goodput for s in range(6))
    assert abs(g - th.exponential) < 0.03 < abs(g - th.first_order)
    assert "first-order theory does not hold" in why(sc, simulate(sc, REQUEUE, 0, days=1))[0]


def test_the_budget_used_is_shown_with_heals_reason():
    # A network fault is a drain for a person (24 h); one node out at once: the others wait,
    # with judge_cluster's own reason.
    sc = scenario(nodes=16, job_mtbf_h=1.0, shares=(0.0, 0.0, 1.0), budget=1, min_nodes=8)
    r = simulate(sc, ELASTIC, seed=1, days=2)
    assert any(k.startswith("the out-of-service budget (1 of 16 nodes) is used") for k in r.waits)
    assert any("heal left a broken node waiting" in w for w in why(sc, r))
    assert {how for _, _, how in r.repairs} <= {"a person's repair"}


def test_heal_gives_a_node_that_keeps_failing_remediation_to_a_person():
    # No remediation fixes anything: after GIVE_UP_AFTER failed reboots in the window,
    # heal's triage hands the node to a person.
    never = Assumptions(fixed_share=0.0, ticket_s=2 * HOUR)
    sc = scenario(nodes=8, job_mtbf_h=6.0, shares=(1.0, 0.0, 0.0), assumptions=never)
    r = simulate(sc, REQUEUE, seed=2, days=3)
    assert r.repairs and {how for _, _, how in r.repairs} == {"a person's repair"}
    # A node's first failure: two failed reboots (10 min + 20 min re-validation each) and the
    # person's 2 h with its re-validation, over two and a half hours. A node that fails again
    # within the window goes to a person at once (its two failures are still counted).
    first: dict[str, float] = {}
    for node, seconds, _ in r.repairs:
        first.setdefault(node, seconds)
    assert min(first.values()) > 2.5 * HOUR


def test_a_tripped_breaker_stops_heal():
    # Half the nodes and more broken at once, and heal acts on none of them.
    slow = Assumptions(heal_period_s=HOUR)
    sc = scenario(nodes=4, job_mtbf_h=0.1, shares=(1.0, 0.0, 0.0), budget=4, min_nodes=1,
                  assumptions=slow)  # fmt: skip
    r = simulate(sc, ELASTIC, seed=3, days=0.5)
    assert r.waits["the breaker is tripped"] > 0


def test_the_simulation_takes_back_by_the_jobs_own_rule():
    # The same function the job asks at its checkpoints (validators/takeback.py), read where
    # the collection ships it.
    import validators.takeback
    from rackform.goodput.simulate import _rule

    assert _rule() is validators.takeback


def shrunk(sc: Scenario, days: float, lost: str = "gpu-0003") -> tuple[_World, set[str]]:
    """A world of `days` at its start, the job shrunk off `lost` (broken, out of service)."""
    w = _World(sc, ELASTIC, 1, days * 24 * HOUR)
    w.state[lost] = "broken"
    return w, {f"gpu-{i:04d}" for i in range(sc.job_nodes)} - {lost}


def test_a_job_near_its_end_never_takes_back_and_with_a_day_left_does():
    sc = scenario(nodes=5, budget=1, min_nodes=3, spares=1)  # a 4-node job, one spare
    w, nodes = shrunk(sc, days=1)
    assert w._takes_back(nodes) and w.res.decisions[TOOK_BACK] == 1
    # Ten minutes left: 600 x 1/4 = 150 s, less than the restart (330 s): it goes on short,
    # counted once however many checkpoints ask.
    w, nodes = shrunk(sc, days=10 / (24 * 60))
    assert not w._takes_back(nodes) and not w._takes_back(nodes)
    assert w.res.decisions == {HELD_BACK: 1}


def test_an_idle_spare_stands_in_for_a_lost_node_not_yet_back():
    sc = scenario(nodes=5, budget=1, min_nodes=3, spares=1)
    w, nodes = shrunk(sc, days=1)  # gpu-0003 broken, gpu-0004 the spare idle
    assert w._takes_back(nodes)
    w.state["gpu-0004"] = "repair"  # no spare either: nothing to take back
    assert not w._takes_back(nodes) and w.res.decisions == {TOOK_BACK: 1}


def test_a_512_node_job_with_an_hour_left_does_not_take_one_node_back():
    sc = scenario(nodes=512)
    w, nodes = shrunk(sc, days=1 / 24)
    w.state["gpu-0003"] = "up"  # back in service: the nodes are there, the hour is not worth it
    assert not w._takes_back(nodes) and w.res.decisions == {HELD_BACK: 1}
    w, nodes = shrunk(sc, days=3)  # three days: 259,200 / 512 = 506 s > 330 s
    w.state["gpu-0003"] = "up"
    assert w._takes_back(nodes)
