"""`rackform up` rolls a change to node software by default on a cluster with a scheduler: the
Pulumi configure resource's update (its provider's methods called as the engine would: the
engine is what this machine cannot run) rolls a change that needs a drain batch by batch
through the cluster's Slurm (the local one, its controller reached through the ssh seam,
tests/fake_ssh.py) before its usual converge, converges a change that needs none as before, and
fails the update where the rollout stops, the next update resuming it. The node side (the roles
and the smoke job on a node) is a stand-in that records what it is asked and checks the batch is
drained (the VM scenario runs the real roles: tests/e2e/test_rolling_vms.py); the converge after
it is a stand-in too (the configure e2e runs it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import partial

import pytest
from slurm_local import NODES, blueprint, ssh_env

from rackform.engine import prepare_all
from rackform.lifecycle.maintenance import Result
from rackform.lifecycle.record import Store
from rackform.plan.inventory import configure_vars, inventory_hosts
from rackform.plan.model import thaw
from rackform.rollout import stage
from rackform.rollout.inputs import rollout_input
from rackform.stack.stages import ConfigureProvider


@dataclass
class Nodes:
    slurm: object
    broken: set[str] = field(default_factory=set)
    calls: list[tuple[str, tuple[str, ...], list[str]]] = field(default_factory=list)

    def __call__(self, roles):
        self.roles = list(roles)
        return self

    def _call(self, step, batch):
        states = self.slurm.node_states()
        self.calls.append((step, tuple(batch), [states[n] for n in batch]))

    def apply(self, batch, variables, reboot):
        self._call("apply", batch)
        return Result(True)

    def validate(self, batch, timeout_s):
        self._call("validate", batch)
        bad = sorted(self.broken & set(batch))
        return Result(not bad, f"smoke job failed on {', '.join(bad)}" if bad else "")


def in_service(slurm, *nodes) -> bool:
    """Back in Slurm's service: idle or running jobs ('*': slurmd slow to answer, on a busy
    machine; still not drained)."""
    states = slurm.node_states()
    return all(states[n].rstrip("*") in ("idle", "allocated", "mixed") for n in nodes)


def props(tmp_path, text: str, name: str) -> dict:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    (p,) = prepare_all(path)
    plan = p.plan
    return {
        "cluster": plan.stack,
        "inventory": thaw(plan.inventory),
        "group_vars": thaw(configure_vars(plan.group_vars)),
        "content_hash": plan.digest,
        "expected_nodes": {"min": plan.nodes, "max": plan.nodes},
        "access": None,
        "rollout": rollout_input(plan),
    }


@pytest.fixture
def up(slurm, tmp_path, monkeypatch):
    """The configure provider as `up` runs it: its converge recorded, its rollouts through the
    local Slurm with the stand-in nodes, the state directory its own."""
    for k, v in ssh_env(slurm, tmp_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("RACKFORM_ROLLOUT_DIR", str(tmp_path / "state"))
    nodes = Nodes(slurm)
    converged: list[list[str]] = []

    def converge(*, inventory, group_vars, access):
        converged.append(sorted(inventory_hosts(inventory)))
        return {"hosts": {}}

    provider = ConfigureProvider(
        work=converge, roll=partial(stage.roll, nodes=nodes), record=stage.record
    )
    return provider, nodes, converged


OLD = blueprint()
NEW = OLD + "software: {driver_branch: '560'}\n"


def test_a_driver_change_rolls_node_by_node_then_converges(up, slurm, tmp_path):
    provider, nodes, converged = up
    old, new = props(tmp_path, OLD, "old"), props(tmp_path, NEW, "new")
    created = provider.create(old)
    assert converged == [list(NODES)]
    # What the nodes run, recorded after the converge: a later `configure --rolling` reads it.
    store = Store(tmp_path / "state", old["cluster"])
    assert store.applied()["digest"] == old["rollout"]["digest"]

    assert provider.diff(created.id, created.outs, new).changes
    done = provider.update(created.id, created.outs, new)
    # One node at a time (the budget of a two-node cluster), a canary first, each drained.
    assert [(s, b) for s, b, _ in nodes.calls] == [
        ("apply", (NODES[0],)), ("validate", (NODES[0],)),
        ("apply", (NODES[1],)), ("validate", (NODES[1],)),
    ]  # fmt: skip
    assert all(st == ["drained"] for _, _, st in nodes.calls), nodes.calls
    assert nodes.roles == ["nvidia_driver"]
    assert done.outs["rolled"]["rolled"] is True
    assert converged == [list(NODES)] * 2  # then the converge, as before
    assert in_service(slurm, *NODES)
    applied = store.applied()
    assert applied["digest"] == new["rollout"]["digest"]
    assert applied["variables"]["nvidia_driver_branch"] == "560"
    assert applied["measured"]["batches"] == 2


def test_a_change_that_needs_no_drain_converges_at_once(up, tmp_path):
    provider, nodes, converged = up
    old = props(tmp_path, OLD, "old")
    new = props(tmp_path, OLD + "software: {dcgm: '3.4'}\n", "new")
    created = provider.create(old)
    done = provider.update(created.id, created.outs, new)
    assert nodes.calls == [] and done.outs["rolled"]["rolled"] is False
    assert converged == [list(NODES)] * 2


def test_a_failed_canary_fails_the_update_and_the_next_resumes(up, slurm, tmp_path):
    provider, nodes, converged = up
    old, new = props(tmp_path, OLD, "old"), props(tmp_path, NEW, "new")
    created = provider.create(old)
    nodes.broken = {NODES[0]}
    with pytest.raises(stage.RollingStopped) as stopped:
        provider.update(created.id, created.outs, new)
    msg = str(stopped.value)
    assert "stopped" in msg and "Run `rackform up` again to resume" in msg, msg
    assert converged == [list(NODES)]  # no converge of every node after a stop
    assert slurm.node_states()[NODES[0]].startswith("drain")
    assert in_service(slurm, NODES[1])
    assert [b for _, b, _ in nodes.calls] == [(NODES[0],), (NODES[0],)]
    # The Pulumi state still holds the old configuration: the next `up` updates again and
    # resumes at the failed canary, fixed now.
    nodes.broken, nodes.calls = set(), []
    done = provider.update(created.id, created.outs, new)
    assert [b for _, b, _ in nodes.calls] == [(NODES[0],)] * 2 + [(NODES[1],)] * 2
    assert done.outs["rolled"]["rolled"] is True and converged == [list(NODES)] * 2
    rec = json.loads((tmp_path / "state" / f"{old['cluster']}.json").read_text())
    assert rec["status"] == "done"


def test_a_rollout_another_blueprint_left_stopped_is_not_run_over(up, slurm, tmp_path):
    provider, nodes, _ = up
    old, new = props(tmp_path, OLD, "old"), props(tmp_path, NEW, "new")
    created = provider.create(old)
    nodes.broken = {NODES[0]}
    with pytest.raises(stage.RollingStopped):
        provider.update(created.id, created.outs, new)
    other = props(tmp_path, OLD + "software: {driver_branch: '570'}\n", "other")
    with pytest.raises(stage.RollingStopped) as refused:
        provider.update(created.id, created.outs, other)
    assert "run it again with that blueprint to resume" in str(refused.value)
    assert "nothing was rolled" in str(refused.value)


def test_what_up_rolls_with(tmp_path):
    spec = props(tmp_path, OLD, "old")["rollout"]
    assert spec["controller"] == {"user": "root", "address": "10.77.7.1", "port": 2222}
    assert spec["domains"] == {"node group gpu": list(NODES)}
    assert spec["lifecycle"]["rollout"]["canary"] is True
    assert "smoke_train_steps" in spec["validation"]
    # No scheduler: `up` converges every node at once, as `configure` does.
    bare = OLD.split("scheduler:")[0] + "lifecycle: {protect: false}\n"
    assert props(tmp_path, bare, "bare")["rollout"] is None
