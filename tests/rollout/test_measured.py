"""A rollout's measured times: each batch's steps timed as the rollout runs (drain with its
jobs' requeue, apply, re-validation), their medians kept with the record of what the nodes run
when it finishes, and the next rollout's expected time made from them (a role the last one did
not run keeps the catalog's minutes). A hand-edited or broken measurement falls back to the
catalog, never a traceback. The scheduler and the nodes here are stand-ins (the local Slurm and
the VMs carry the real steps: test_rolling_slurm.py, tests/e2e/test_rolling_vms.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest

from rackform.blueprint.schema.rollout import RolloutPolicy
from rackform.blueprint.schema.sections import LifecycleSpec
from rackform.lifecycle.maintenance import Result
from rackform.lifecycle.outcome import Outcome
from rackform.lifecycle.record import DONE, FAILED, Batch, Record, Store, new_record
from rackform.rollout.changes import catalog
from rackform.rollout.measured import Measured, last_measured, measure
from rackform.rollout.plan import BASIS, Basis, rollout
from rackform.rollout.roll import Roll

NODES = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Slurm:
    """Drains, requeues and returns at once; a drain takes `drain_s` on the clock."""

    clock: Clock
    drain_s: float

    def out(self):
        return set()

    def drain(self, batch, reason):
        self.clock.now += self.drain_s
        return [Outcome(n, True, "drained") for n in batch]

    def release(self, batch):
        return []

    def wait_idle(self, batch, timeout_s):
        return []

    def resume(self, batch):
        return [Outcome(n, True, "back") for n in batch]


@dataclass
class Nodes:
    clock: Clock
    apply_s: list[float]
    validate_s: float
    broken: str = ""

    def apply(self, batch, variables, reboot):
        self.clock.now += self.apply_s.pop(0)
        return Result(True)

    def validate(self, batch, timeout_s):
        self.clock.now += self.validate_s
        return Result(self.broken not in batch, "smoke job failed")


def test_each_step_of_each_batch_is_timed_and_the_medians_kept(tmp_path):
    clock = Clock()
    store = Store(tmp_path, "dc-train-2-default")
    rec = new_record(
        store.stack, "sha256:" + "ab" * 32, "drain", [[n] for n in NODES], {}, {}, ["nccl_rdma"]
    )
    nodes = Nodes(clock, [100.0, 300.0, 200.0], 240.0)
    done = Roll(store, rec, RolloutPolicy(), 1, Slurm(clock, 30.0), nodes, lambda _: None,
                clock=clock).run()  # fmt: skip
    assert done.status == "done"
    assert [b.seconds for b in done.batches] == [
        {"drain": 30.0, "apply": a, "validate": 240.0} for a in (100.0, 300.0, 200.0)
    ]
    # Written with the record after each step: a killed run keeps what it timed.
    on_disk = json.loads(store.path.read_text())
    assert on_disk["batches"][2]["seconds"]["apply"] == 200.0
    m = measure(done, at=0.0)
    assert (m.batches, m.cls, m.roles) == (3, "drain", ("nccl_rdma",))
    assert (m.drain_s, m.apply_s, m.validate_s) == (30.0, 200.0, 240.0)


def test_only_batches_that_finished_with_every_step_timed_count():
    timed = {"drain": 10.0, "apply": 20.0, "validate": 30.0}
    rec = Record(
        "s", "sha256:x", "drain",
        [Batch(["a"], DONE, seconds=dict(timed)),
         Batch(["b"], FAILED, seconds={**timed, "apply": 9999.0}),
         Batch(["c"], DONE, seconds={"drain": 5.0}),  # a record from before timing
         Batch(["d"], DONE, seconds={**timed, "apply": 40.0})],
        {}, {},
    )  # fmt: skip
    m = measure(rec, at=0.0)
    assert m.batches == 2 and m.apply_s == 30.0  # the median of 20 and 40
    assert measure(replace(rec, batches=rec.batches[1:3])) is None


def _basis(measured=None, **variables):
    return Basis(variables, {}, {"rack a": NODES}, LifecycleSpec(), measured)


def _measured(**kw):
    doc = {"at": 0, "batches": 2, "cls": "drain", "roles": ["nccl_rdma"], "drain_s": 60,
           "apply_s": 120, "validate_s": 180}  # fmt: skip
    return Measured.from_json({**doc, **kw})


def test_the_estimate_is_made_from_what_the_last_rollout_measured():
    change = ({"nccl_rdma_nccl_version": "2.21"}, {"nccl_rdma_nccl_version": "2.23"})
    guess = rollout(_basis(None, **change[0]), _basis(None, **change[1]))
    c = catalog()
    assert guess.basis == BASIS
    assert guess.minutes_per_batch == c.requeue + c.converge["nccl_rdma"] + c.validate
    # This cluster's nccl_rdma converge took 2 minutes, its drain 1 and its re-validation 3.
    known = rollout(_basis(_measured(), **change[0]), _basis(None, **change[1]))
    assert known.minutes_per_batch == 1 + 2 + 3
    assert known.expected_minutes == 6 * len(known.batches)
    assert known.basis.startswith("measured by this cluster's last rolling change")
    assert "median of 2 batches" in known.basis and known.as_json()["basis"] == known.basis


def test_a_role_the_last_rollout_did_not_run_keeps_the_catalogs_minutes():
    c = catalog()
    change = (
        {"nccl_rdma_nccl_version": "2.21", "dcgm_version": "3", "nvidia_driver_branch": "550"},
        {"nccl_rdma_nccl_version": "2.23", "dcgm_version": "4", "nvidia_driver_branch": "560"},
    )
    r = rollout(_basis(_measured(), **change[0]), _basis(None, **change[1]))
    assert r.cls == "reboot" and r.roles == ["dcgm", "nccl_rdma", "nvidia_driver"]
    # nccl_rdma at the measured pace (2 min for the catalog's 10); dcgm, the driver and the
    # reboot the last rollout did not have: the catalog's.
    want = 1 + 2 + c.converge["dcgm"] + c.converge["nvidia_driver"] + c.reboot + 3
    assert r.minutes_per_batch == want


def test_a_measured_reboot_shares_the_apply_time_with_the_roles():
    c = catalog()
    m = _measured(cls="reboot", roles=["nvidia_driver"], apply_s=(20 + 10) * 60 / 2)
    old, new = {"nvidia_driver_branch": "550"}, {"nvidia_driver_branch": "560"}
    r = rollout(_basis(m, **old), _basis(None, **new))
    # Half the catalog's driver converge and reboot: this cluster does both in half the time.
    assert c.converge["nvidia_driver"] == 20 and c.reboot == 10
    assert r.minutes_per_batch == 1 + 10 + 5 + 3


def test_waiting_for_jobs_is_the_policys_not_the_measured_requeue():
    life = LifecycleSpec(rollout=RolloutPolicy(jobs="wait", wait_minutes=45))
    old = Basis({"nccl_rdma_nccl_version": "1"}, {}, {"r": NODES}, life, _measured())
    new = Basis({"nccl_rdma_nccl_version": "2"}, {}, {"r": NODES}, life)
    assert rollout(old, new).minutes_per_batch == 45 + 2 + 3


@pytest.mark.parametrize(
    "edit",
    [
        {"drain_s": "a minute"},
        {"apply_s": -5},
        {"batches": 0},
        {"validate_s": None},
        {"roles": 7},
    ],
    ids=["words", "negative", "no batches", "null", "roles not a list"],
)
def test_a_hand_edited_measurement_falls_back_to_the_catalog(edit, tmp_path):
    store = Store(tmp_path, "dc-train-2-default")
    good = _measured().as_json()
    store.set_applied({}, {}, "sha256:x", {**good, **edit})
    assert last_measured(tmp_path, "dc-train-2-default") is None
    (tmp_path / "other.applied.json").write_text("{not json")
    assert last_measured(tmp_path, "other") is None
    assert last_measured(tmp_path, "never-rolled") is None


def test_a_full_configure_keeps_the_last_measurement(tmp_path):
    store = Store(tmp_path, "dc-train-2-default")
    store.set_applied({"a": 1}, {}, "sha256:1", _measured().as_json())
    store.set_applied({"a": 2}, {}, "sha256:2")  # what configure (not rolling) writes
    doc = store.applied()
    assert doc["variables"] == {"a": 2}
    assert last_measured(tmp_path, "dc-train-2-default") == _measured()
