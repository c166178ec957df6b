"""`rackform configure FILE --rolling`, the real command: what it refuses before touching a node,
the lock, the record of what the nodes run, and the budget read from the cluster's Slurm (the
local one, its controller reached through the ssh seam, tests/fake_ssh.py). The runs here stop
before Ansible would reach a node: the roles on real nodes are the VM scenario's."""

from __future__ import annotations

import json
import subprocess
import sys

from blueprint_helpers import ROOT
from slurm_local import NODES, blueprint, ssh_env

from rackform.engine import prepare_all
from rackform.lifecycle.lease import controller_lock
from rackform.lifecycle.record import Store, new_record
from rackform.rollout.plan import basis
from rackform.scheduler.remote import Local

STACK = "slurm-a-default"


def configure(bp, env, state, *extra):
    return subprocess.run(
        [sys.executable, "-m", "rackform", "configure", str(bp), "--rolling",
         "--state-dir", str(state), *extra],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=180,
    )  # fmt: skip


def write(tmp_path, text: str):
    bp = tmp_path / "slurm-a.yaml"
    bp.write_text(text)
    return bp


def applied(store: Store, bp, **changes) -> None:
    """Record that the nodes run the blueprint's variables, with `changes` instead."""
    (p,) = prepare_all(bp)
    b = basis(p.plan)
    store.set_applied({**b.variables, **changes}, {}, "sha256:" + "00" * 32)


def test_a_cluster_without_a_scheduler_is_refused(tmp_path, slurm):
    text = blueprint().split("scheduler:")[0] + "lifecycle: {protect: false}\n"
    r = configure(write(tmp_path, text), ssh_env(slurm, tmp_path), tmp_path / "state")
    assert r.returncode == 2 and "declares no scheduler" in r.stderr and "Traceback" not in r.stderr


def test_flags_that_do_not_go_together_are_refused(tmp_path):
    bp = write(tmp_path, blueprint())
    for extra, says in (
        (["--limit", NODES[0]], "--rolling takes its batches from the rollout: no --limit"),
        (["--rollback", "--abandon"], "--rollback or --abandon, not both"),
    ):
        r = configure(bp, None, tmp_path / "state", *extra)
        assert r.returncode == 2 and says in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "rackform", "configure", str(bp), "--abandon"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "--rollback and --abandon go with --rolling" in r.stderr


def test_nothing_changed_touches_nothing(tmp_path, slurm):
    bp = write(tmp_path, blueprint())
    applied(Store(tmp_path / "state", STACK), bp)
    r = configure(bp, ssh_env(slurm, tmp_path), tmp_path / "state")
    assert r.returncode == 0, r.stderr
    assert "nothing to change" in r.stdout
    assert not (tmp_path / "ssh.log").exists()  # not even the controller was asked


def test_the_budget_used_by_a_person_stops_the_rollout_before_any_drain(tmp_path, slurm):
    bp = write(tmp_path, blueprint())
    store = Store(tmp_path / "state", STACK)
    applied(store, bp, nvidia_driver_branch="535")  # the nodes run 535; the blueprint says 550
    slurm.run("scontrol", "update", f"nodename={NODES[1]}", "state=drain", "reason=bad PSU")
    r = configure(bp, ssh_env(slurm, tmp_path), tmp_path / "state")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "rolling: 2 batches of up to 1" in r.stdout
    assert f"already out of service ({NODES[1]}) and the budget is 1" in r.stdout
    rec = json.loads(store.path.read_text())
    assert rec["status"] == "stopped" and [b["status"] for b in rec["batches"]] == ["pending"] * 2
    assert rec["roles"] == ["nvidia_driver"]  # what each batch's apply will run
    assert slurm.node_states()[NODES[0]] == "idle"
    events = [e["event"] for e in store.log.entries()]
    assert events == ["started", "stopped"]


def test_a_stopped_rollout_of_another_blueprint_is_named(tmp_path, slurm):
    bp = write(tmp_path, blueprint())
    store = Store(tmp_path / "state", STACK)
    rec = new_record(STACK, "sha256:" + "ef" * 32, "reboot", [[NODES[0]], [NODES[1]]], {}, {})
    rec.status, rec.why = "stopped", "batch 1 failed: validation: smoke job failed"
    rec.batches[0].status = "failed"
    store.write(rec)
    r = configure(bp, ssh_env(slurm, tmp_path), tmp_path / "state")
    assert r.returncode == 2
    assert "the rollout to efefefefefef is stopped at batch 1 of 2" in r.stderr
    assert "--rollback / --abandon it first" in r.stderr
    r = configure(bp, ssh_env(slurm, tmp_path), tmp_path / "state", "--abandon")
    assert r.returncode == 0 and f"still drained: {NODES[0]}" in r.stdout
    assert json.loads(store.path.read_text())["status"] == "abandoned"
    r = configure(bp, ssh_env(slurm, tmp_path), tmp_path / "state", "--rollback")
    assert r.returncode == 2 and "no stopped rollout to roll back" in r.stderr


def test_a_second_run_while_one_holds_the_lock_exits_3(tmp_path, slurm):
    bp = write(tmp_path, blueprint())
    with Store(tmp_path / "state", STACK).lock():
        r = configure(bp, ssh_env(slurm, tmp_path), tmp_path / "state")
    assert r.returncode == 3 and "a rolling change or heal is in progress (pid" in r.stdout


def test_a_run_from_another_host_finds_the_lock_on_the_controller(tmp_path, slurm):
    """Heal holds the stack's lock on the controller from another host (its own state
    directory, which this run cannot see): the rolling change is refused there (exit 3,
    naming the holder) before it drains a node or writes a record."""
    bp = write(tmp_path, blueprint())
    applied(Store(tmp_path / "state", STACK), bp, nvidia_driver_branch="535")
    with controller_lock(Local(), STACK, "heal"):  # the fake ssh's commands run here
        r = configure(bp, ssh_env(slurm, tmp_path), tmp_path / "state")
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"{STACK}: held on root@10.77.7.1:2222 by heal: pid " in r.stdout
    assert set(slurm.node_states().values()) <= {"idle", "allocated", "mixed"}
    assert Store(tmp_path / "state", STACK).read() is None


def test_a_hand_edited_record_is_named_not_a_traceback(tmp_path, slurm):
    bp = write(tmp_path, blueprint())
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / f"{STACK}.json").write_text("{cut")
    r = configure(bp, ssh_env(slurm, tmp_path), tmp_path / "state")
    assert r.returncode == 2 and f"{STACK}.json: cannot read" in r.stderr
    assert "Traceback" not in r.stderr


def test_extra_vars_are_part_of_what_the_nodes_run(tmp_path, slurm):
    """The same --extra-vars as the last configuration: no change; without them, their removal
    is a change (a variable the catalog does not know drains: the safe side)."""
    bp = write(tmp_path, blueprint())
    store = Store(tmp_path / "state", STACK)
    applied(store, bp, slurm_cred_expire_s=10)
    r = configure(bp, ssh_env(slurm, tmp_path), tmp_path / "state", "-x", "slurm_cred_expire_s=10")
    assert r.returncode == 0 and "nothing to change" in r.stdout, r.stdout + r.stderr
    slurm.run("scontrol", "update", f"nodename={NODES[1]}", "state=drain", "reason=hold")
    r = configure(bp, ssh_env(slurm, tmp_path), tmp_path / "state")
    assert r.returncode == 4 and "slurm_cred_expire_s needs each node drained" in r.stdout, r.stdout
