"""The compiled fairness section: accounts with their QOS and default QOS worked out, QOS with
their limits, the weights, and the slurm role's variables made from them; none of it (and no
slurmdbd) without the section."""

from __future__ import annotations

from pathlib import Path

from blueprint_helpers import SLURM_MIXED

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.model import thaw
from rackform.plan.slurm import AccountPlan, QosPlan

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_compiles_accounts_qos_and_weights():
    plan = compile_effective(load_effective(ROOT / "blueprints" / "baremetal-slurm.yaml"))
    f = plan.scheduler.fairness
    assert f.qos == (QosPlan("urgent", 100, None, 8, None),)
    assert f.accounts == (
        AccountPlan("llm-pretrain", 3, ("alice", "bob"), ("normal", "urgent"), "normal", None),
        # No qos listed: Slurm's normal and every declared QOS.
        AccountPlan("vision", 1, ("carol",), ("normal", "urgent"), "normal", 16),
    )
    assert (f.half_life_days, f.fairshare_weight, f.qos_weight) == (7, 10000, 10000)
    v = thaw(plan.group_vars)
    assert v["slurm_accounting"] is True
    assert v["slurm_qos"] == [
        {"name": "urgent", "priority": 100, "max_gpus": 0, "max_gpus_per_user": 8,
         "max_gpus_per_account": 0},
    ]  # fmt: skip
    assert v["slurm_accounts"][1] == {
        "name": "vision", "share": 1, "users": ["carol"], "qos": ["normal", "urgent"],
        "default_qos": "normal", "max_gpus": 16,
    }  # fmt: skip
    assert (v["slurm_fairshare_weight"], v["slurm_qos_weight"], v["slurm_half_life_days"]) == (
        10000,
        10000,
        7,
    )


def test_the_first_listed_qos_is_the_default_where_none_is_named(write):
    text = SLURM_MIXED + (
        "  fairness:\n"
        "    qos: [{name: low}, {name: high, priority: 10}]\n"
        "    accounts: [{name: ml, qos: [high, low]}]\n"
        "    half_life_days: 14\n"
        "    qos_weight: 0\n"
    )
    v = thaw(compile_effective(load_effective(write(text))).group_vars)
    assert (v["slurm_accounts"][0]["qos"], v["slurm_accounts"][0]["default_qos"]) == (
        ["high", "low"],
        "high",
    )
    assert (v["slurm_half_life_days"], v["slurm_qos_weight"]) == (14, 0)


def test_without_fairness_there_is_no_accounting(write):
    plan = compile_effective(load_effective(write(SLURM_MIXED)))
    assert plan.scheduler.fairness is None
    v = plan.group_vars
    assert v["slurm_accounting"] is False
    assert not any(k in v for k in ("slurm_accounts", "slurm_qos", "slurm_fairshare_weight"))
