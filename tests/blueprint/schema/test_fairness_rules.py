"""The scheduler's `fairness:` section: accounts and QOS load, and each mistake is one located
line at the field that breaks it, with a fix; names as sacctmgr would store them."""

from __future__ import annotations

import pytest
from blueprint_helpers import BARE_METAL, SLURM_MIXED

from rackform.blueprint.loader import load_effective
from rackform.blueprint.problems import BlueprintError

# BARE_METAL has two hosts of 8 GPUs: 16 in all.
SLURM = """
scheduler:
  type: slurm
  controller: n1
  partitions:
    - {name: batch, node_groups: [hgx], default: true}
  fairness:
    qos:
      - {name: urgent-1, priority: 100, max_gpus_per_user: 8}
      - {name: cheap_q, max_gpus: 16, max_gpus_per_account: 4}
    accounts:
      - {name: llm-pretrain, share: 3, users: [alice, bob_2], qos: [normal, urgent-1], default_qos: urgent-1}
      - {name: vision, users: [alice], max_gpus: 16}
"""


def problems(write, text) -> dict:
    with pytest.raises(BlueprintError) as exc:
        load_effective(write(text))
    return {p.path: p for p in exc.value.problems}


def test_accounts_and_qos_load_with_slurms_defaults(write):
    f = load_effective(write(BARE_METAL + SLURM)).blueprint.scheduler.fairness
    assert [(q.name, q.priority, q.max_gpus, q.max_gpus_per_user) for q in f.qos] == [
        ("urgent-1", 100, None, 8),
        ("cheap_q", 0, 16, None),
    ]
    llm, vision = f.accounts
    assert (llm.share, llm.users, llm.default(["urgent-1", "cheap_q"])) == (
        3,
        ("alice", "bob_2"),
        "urgent-1",
    )
    # No qos listed: Slurm's normal and every declared one, normal the default.
    assert vision.share == 1
    assert vision.allowed_qos(["urgent-1", "cheap_q"]) == ("normal", "urgent-1", "cheap_q")
    assert vision.default(["urgent-1", "cheap_q"]) == "normal"
    assert (f.half_life_days, f.fairshare_weight, f.qos_weight) == (7, 10000, 10000)


def test_a_scheduler_without_fairness_has_none(write):
    assert load_effective(write(SLURM_MIXED)).blueprint.scheduler.fairness is None


@pytest.mark.parametrize(
    "old,new,path,needle,fix",
    [
        ("name: vision", "name: llm-pretrain", "scheduler.fairness.accounts[1].name",
         "account 'llm-pretrain' is declared twice", "rename"),
        ("name: cheap_q", "name: urgent-1", "scheduler.fairness.qos[1].name",
         "QOS 'urgent-1' is declared twice", "rename"),
        ("qos: [normal, urgent-1]", "qos: [normal, urgent-1, urgnet-1]", "scheduler.fairness.accounts[0].qos[2]",
         "account 'llm-pretrain' names QOS 'urgnet-1', which is not declared", "did you mean 'urgent-1'?"),
        ("default_qos: urgent-1", "default_qos: fast", "scheduler.fairness.accounts[0].default_qos",
         "default_qos 'fast' is not declared", "one of"),
        ("default_qos: urgent-1", "default_qos: cheap_q", "scheduler.fairness.accounts[0].default_qos",
         "default_qos 'cheap_q' is not one of its qos (normal, urgent-1)", "add 'cheap_q' to its qos"),
        ("name: vision", "name: Vision", "scheduler.fairness.accounts[1].name",
         "account 'Vision' is not lowercase: sacctmgr stores it as 'vision'", "write 'vision'"),
        ("name: cheap_q", "name: Cheap_Q", "scheduler.fairness.qos[1].name",
         "QOS 'Cheap_Q' is not lowercase", "write 'cheap_q'"),
        ("name: vision", "name: 'vision,ml'", "scheduler.fairness.accounts[1].name",
         "account 'vision,ml' is not a name Slurm keeps as written", "a letter first"),
        ("name: vision", "name: 2vision", "scheduler.fairness.accounts[1].name",
         "account '2vision' is not a name", "a letter first"),
        ("name: vision", "name: root", "scheduler.fairness.accounts[1].name",
         "'root' is Slurm's own account", "after the team"),
        ("users: [alice, bob_2]", "users: [alice, Bob]", "scheduler.fairness.accounts[0].users[1]",
         "user 'Bob' is not lowercase", "write 'bob'"),
        ("users: [alice, bob_2]", "users: [alice, 'bob smith']", "scheduler.fairness.accounts[0].users[1]",
         "user 'bob smith' is not a name Slurm keeps as written", "lowercase letter or '_' first"),
        ("users: [alice, bob_2]", "users: [alice, alice]", "scheduler.fairness.accounts[0].users[1]",
         "user 'alice' is listed twice in account 'llm-pretrain'", "once"),
        ("max_gpus_per_user: 8", "max_gpus_per_user: 17", "scheduler.fairness.qos[0].max_gpus_per_user",
         "max_gpus_per_user 17 is more than the cluster's 16 GPUs", "at most 16"),
        ("max_gpus: 16}\n", "max_gpus: 24}\n", "scheduler.fairness.accounts[1].max_gpus",
         "account 'vision': max_gpus 24 is more than the cluster's 16 GPUs", "at most 16"),
        ("share: 3", "share: 0", "scheduler.fairness.accounts[0].share",
         "greater than or equal to 1", ""),
        ("max_gpus_per_account: 4", "max_gpus_per_account: 0", "scheduler.fairness.qos[1].max_gpus_per_account",
         "greater than or equal to 1", ""),
        ("  fairness:\n", "  fairness:\n    half_life_days: 0\n",
         "scheduler.fairness.half_life_days", "greater than or equal to 1", ""),
    ],
)  # fmt: skip
def test_each_mistake_is_one_located_line(write, old, new, path, needle, fix):
    assert old in SLURM
    got = problems(write, BARE_METAL + SLURM.replace(old, new, 1))
    assert list(got) == [path]
    assert needle in got[path].message
    assert fix in (got[path].fix or "")
    assert got[path].line is not None


def test_a_limit_on_a_cluster_that_adds_a_cpu_host_counts_only_gpus(write):
    # c1 declares no GPU: the cluster still has 16.
    text = SLURM_MIXED + "  fairness: {accounts: [{name: ml, max_gpus: 17}]}\n"
    got = problems(write, text)
    assert list(got) == ["scheduler.fairness.accounts[0].max_gpus"]
    assert "the cluster's 16 GPUs" in got["scheduler.fairness.accounts[0].max_gpus"].message


def test_fairness_needs_an_account(write):
    text = BARE_METAL + SLURM.split("    accounts:")[0].replace(
        "  fairness:\n", "  fairness:\n    accounts: []\n"
    )
    got = problems(write, text)
    assert list(got) == ["scheduler.fairness.accounts"]
