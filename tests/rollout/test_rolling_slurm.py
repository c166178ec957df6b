"""A rolling change carried out against a real Slurm on loopback (tests/slurm_local.py: two
nodes): drains and requeues through Slurm, the record written after every step, resume after a
kill, a failed canary that stops the rollout and rolls back, the budget counted with nodes a
person drained. The roles and the smoke job are what this machine cannot run on a node: the
`Nodes` side here applies nothing, checks that it is only ever asked for drained nodes, and
fails validation where told to (the VM scenario runs the real roles)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest
from slurm_local import NODES

from rackform.blueprint.schema.rollout import RolloutPolicy
from rackform.lifecycle.lock import Held
from rackform.lifecycle.maintenance import Result
from rackform.lifecycle.record import DONE, FAILED, PENDING, RecordError, Store, new_record
from rackform.lifecycle.slurm import SlurmSteps
from rackform.lifecycle.states import out_of_service
from rackform.rollout.roll import Roll, rollback

OLD, NEW = {"nvidia_driver_branch": "550"}, {"nvidia_driver_branch": "560"}


@dataclass
class Nodes:
    """Applies nothing; records each call with the batch's Slurm states at that moment."""

    slurm: object
    broken: set[str] = field(default_factory=set)
    die_on: tuple[str, str] | None = None  # (step, node): raise there, as a killed run would
    calls: list[tuple[str, tuple[str, ...], dict]] = field(default_factory=list)

    def _call(self, step: str, batch, extra: dict) -> None:
        states = self.slurm.node_states()
        self.calls.append((step, tuple(batch), {**extra, "states": [states[n] for n in batch]}))
        if self.die_on and self.die_on[0] == step and self.die_on[1] in batch:
            raise KeyboardInterrupt(f"killed during {step}")

    def apply(self, batch, variables, reboot):
        self._call("apply", batch, {"variables": dict(variables), "reboot": reboot})
        return Result(True)

    def validate(self, batch, timeout_s):
        self._call("validate", batch, {})
        bad = sorted(self.broken & set(batch))
        return Result(not bad, f"smoke job failed on {', '.join(bad)}" if bad else "")


class Sampler:
    """The most of NODES out of service at once, read from sinfo every 0.2 s while it runs."""

    def __init__(self, slurm):
        self.slurm, self.most, self._stop = slurm, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            states = self.slurm.node_states()
            self.most = max(self.most, sum(out_of_service(states.get(n, "")) for n in NODES))
            time.sleep(0.2)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join()


def roll(slurm, tmp_path, nodes, policy=None, budget=1, batches=None, rec=None):
    store = Store(tmp_path / "state", "slurm-a-default")
    if rec is None:
        rec = new_record(
            "slurm-a-default", "sha256:" + "ab" * 32, "reboot",
            batches or [[NODES[0]], [NODES[1]]], OLD, NEW,
        )  # fmt: skip
        store.write(rec)
    steps = SlurmSteps(slurm.runner, NODES, poll_s=0.2)
    return Roll(store, rec, policy or RolloutPolicy(), budget, steps, nodes, out=lambda _: None,
                requeue_wait_s=20)  # fmt: skip


RESUMABLE = (
    # A job that counts to 10, half a second a step, from the count its last run left: run
    # again after a requeue, it goes on from there. Each start is a line in starts. The count
    # is written aside and renamed, as a checkpoint must be: a requeue's kill between `>`'s
    # truncation and the write left an empty count, and the rerun stopped at once (CI, stop 50).
    'n=$(cat {d}/count 2>/dev/null || echo 0); echo "$SLURMD_NODENAME $n" >> {d}/starts; '
    'while [ "$n" -lt 10 ]; do n=$((n+1)); echo $n > {d}/count.new; mv {d}/count.new {d}/count;'
    " sleep 0.5; done"
)


def test_a_rollout_requeues_the_job_loses_nothing_and_keeps_to_the_budget(slurm, tmp_path):
    job = slurm.sbatch("--requeue", "-N1", "--wrap", RESUMABLE.format(d=tmp_path))
    slurm.wait_state(job, "RUNNING")
    where = slurm.run("squeue", "-h", "-j", job, "-o", "%N").stdout.strip()
    first = [where, *[n for n in NODES if n != where]]  # the job's node is the canary
    nodes = Nodes(slurm)
    with Sampler(slurm) as sampler:
        rec = roll(slurm, tmp_path, nodes, batches=[[first[0]], [first[1]]]).run()
    assert rec.status == "done", rec.why
    assert [b.status for b in rec.batches] == [DONE, DONE]
    # Each batch was applied and validated drained, never with a job on it; in order.
    assert [(s, b) for s, b, _ in nodes.calls] == [
        ("apply", (first[0],)), ("validate", (first[0],)),
        ("apply", (first[1],)), ("validate", (first[1],)),
    ]  # fmt: skip
    assert all(st == ["drained"] for _, _, x in nodes.calls for st in [x["states"]])
    assert nodes.calls[0][2]["variables"] == NEW and nodes.calls[0][2]["reboot"]
    assert sampler.most == 1, "more nodes out than the budget"
    # The job was requeued off the canary and finished, from the count its first run left.
    finished = f"JobId={job} "
    # Its rerun waits out the requeue delay and a scheduling pass: on a loaded CI machine a
    # minute was once not enough (a whole-suite run, 2026-11-28), so two, with why it waits.
    assert slurm.wait(lambda: any(line.startswith(finished) and "JobState=COMPLETED" in line
                                  for line in slurm.jobcomp.read_text().splitlines()), 120), (
        slurm.run("squeue", "--states=all", "-o", "%i %T %r %N", check=False).stdout,
        slurm.log(), slurm.jobcomp.read_text())  # fmt: skip
    starts = (tmp_path / "starts").read_text().split()
    assert (tmp_path / "count").read_text().strip() == "10"
    assert len(starts) >= 4 and starts[3] != "0", starts  # started again, not from the start
    assert set(slurm.node_states().values()) <= {"idle", "allocated", "mixed"}
    log = [e["status"] for e in Store(tmp_path / "state", "slurm-a-default").log.entries()
           if e.get("event") == "batch"]  # fmt: skip
    assert log == ["drained", "applied", "validated", "done"] * 2


def test_a_failed_canary_stops_the_rollout_and_rolls_back(slurm, tmp_path):
    nodes = Nodes(slurm, broken={NODES[0]})
    r = roll(slurm, tmp_path, nodes)
    rec = r.run()
    assert rec.status == "stopped" and "batch 1 failed: validation: smoke job failed" in rec.why
    assert [b.status for b in rec.batches] == [FAILED, PENDING]
    states = slurm.node_states()
    assert states[NODES[0]] == "drained" and states[NODES[1]] == "idle"
    reason = slurm.run("sinfo", "-h", "-N", "-n", NODES[0], "-o", "%E").stdout.strip()
    assert reason.startswith("rackform rollout abababababab batch 1")
    # The other node was never touched and still runs jobs.
    assert {b for _, b, _ in nodes.calls} == {(NODES[0],)}
    job = slurm.sbatch("-N1", "--wrap", "true")
    slurm.wait_state(job, "COMPLETED")
    # Rolled back: the old variables applied to the canary, validated, returned to service.
    nodes.broken.clear()
    rec = rollback(r)
    assert rec.status == "rolled back" and rec.batches[1].status == PENDING
    assert nodes.calls[-2][0] == "apply" and nodes.calls[-2][2]["variables"] == OLD
    assert back_in_service(slurm, NODES[0])


def back_in_service(slurm, node: str) -> bool:
    """Idle, once slurmctld has heard from it again (`idle*` right after a resume)."""
    return slurm.wait(lambda: slurm.node_states()[node] == "idle", 15)


def test_a_run_killed_mid_batch_resumes_without_redoing_a_finished_batch(slurm, tmp_path):
    first = Nodes(slurm, die_on=("validate", NODES[1]))
    with pytest.raises(KeyboardInterrupt):
        roll(slurm, tmp_path, first).run()
    store = Store(tmp_path / "state", "slurm-a-default")
    rec = store.read()
    assert [b.status for b in rec.batches] == [DONE, "applied"]
    # The next run, from the record: batch 1 untouched, batch 2 from its validation.
    second = Nodes(slurm)
    rec = roll(slurm, tmp_path, second, rec=rec).run()
    assert rec.status == "done" and [s for s, _, _ in second.calls] == ["validate"]
    assert all(back_in_service(slurm, n) for n in NODES)


def test_a_batch_that_passed_is_never_left_drained(slurm, tmp_path):
    """Killed after the validation passed and before the return: the next run only returns it."""
    store = Store(tmp_path / "state", "slurm-a-default")
    rec = new_record("slurm-a-default", "sha256:" + "cd" * 32, "drain", [[NODES[0]]], OLD, NEW)
    rec.batches[0].status = "validated"
    store.write(rec)
    slurm.run("scontrol", "update", f"nodename={NODES[0]}", "state=drain", "reason=killed run")
    nodes = Nodes(slurm)
    done = roll(slurm, tmp_path, nodes, rec=store.read()).run()
    assert done.status == "done" and nodes.calls == []
    assert back_in_service(slurm, NODES[0])


def test_nodes_a_person_drained_count_against_the_budget(slurm, tmp_path):
    slurm.run("scontrol", "update", f"nodename={NODES[1]}", "state=drain", "reason=bad fan")
    nodes = Nodes(slurm)
    rec = roll(slurm, tmp_path, nodes, batches=[[NODES[0]]]).run()
    assert rec.status == "stopped" and rec.batches[0].status == PENDING
    assert f"1 node(s) already out of service ({NODES[1]}) and the budget is 1" in rec.why
    assert slurm.node_states()[NODES[0]] == "idle" and nodes.calls == []


def test_a_job_that_cannot_be_requeued_fails_the_batch_and_names_it(slurm, tmp_path):
    job = slurm.sbatch("--no-requeue", "-N1", "-w", NODES[0], "--wrap", "sleep 60")
    slurm.wait_state(job, "RUNNING")
    r = roll(slurm, tmp_path, Nodes(slurm), batches=[[NODES[0]]])
    r.requeue_wait_s = 2
    rec = r.run()
    assert rec.status == "stopped" and rec.batches[0].status == FAILED
    assert f"job {job}" in rec.batches[0].why and "not requeued" in rec.batches[0].why
    assert slurm.node_states()[NODES[0]] in ("draining", "drained")


def test_waiting_for_jobs_lets_them_finish(slurm, tmp_path):
    job = slurm.sbatch("-N1", "-w", NODES[0], "--wrap", "sleep 2")
    slurm.wait_state(job, "RUNNING")
    policy = RolloutPolicy(jobs="wait", wait_minutes=1)
    rec = roll(slurm, tmp_path, Nodes(slurm), policy=policy, batches=[[NODES[0]]]).run()
    assert rec.status == "done", rec.why
    assert slurm.state(job) in ("COMPLETED", "")  # finished, never requeued


def test_a_second_run_finds_the_lock_held(tmp_path):
    store = Store(tmp_path, "slurm-a-default")
    with (
        store.lock(),
        pytest.raises(Held, match=r"a rolling change or heal is in progress \(pid "),
        Store(tmp_path, "slurm-a-default").lock(),
    ):
        pass
    with store.lock():  # released
        pass


def test_a_hand_edited_record_is_named(tmp_path):
    store = Store(tmp_path, "slurm-a-default")
    store.path.write_text(
        '{"stack": "slurm-a-default", "batches": [{"nodes": ["a"], "status": "half"}]}'
    )
    with pytest.raises(RecordError, match=r"slurm-a-default\.json"):
        store.read()
    store.path.write_text("{not json")
    with pytest.raises(RecordError, match="cannot read"):
        store.read()
