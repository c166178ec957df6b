"""Draining through a real Slurm (tests/slurm_local.py): scontrol really drains, a running job
is left to finish, a second drain changes nothing (not even the reason), and each node's outcome
is its own."""

from __future__ import annotations

import shutil

import pytest
from slurm_local import NODES

from rackform.lifecycle.drain import drain, node_states
from rackform.scheduler.remote import Local, RemoteError

pytestmark = pytest.mark.usefixtures("slurm")
REASON = "rackform reap: slurm-a/default idle; it's $(not run)"


def reasons(slurm) -> dict[str, str]:
    out = slurm.run("sinfo", "--noheader", "--Node", "--format=%N|%E").stdout
    return dict(line.split("|", 1) for line in out.splitlines())


def test_idle_nodes_are_drained_with_the_reason(slurm):
    got = drain(slurm.runner, list(NODES), REASON)
    assert [(o.subject, o.ok, o.detail) for o in got] == [
        (n, True, "drained in Slurm") for n in NODES
    ]
    assert node_states(slurm.runner) == {n: "drained" for n in NODES}
    assert reasons(slurm) == {n: REASON for n in NODES}  # one word on the far side, unexpanded


def test_a_running_job_is_left_to_finish(slurm):
    job = slurm.sbatch("-w", NODES[0], "--wrap", "sleep 120")
    slurm.wait_state(job, "RUNNING")
    got = {o.subject: o for o in drain(slurm.runner, list(NODES), REASON)}
    assert got[NODES[0]].ok and "draining" in got[NODES[0]].detail
    assert "running jobs finish first" in got[NODES[0]].detail
    assert got[NODES[1]].ok and got[NODES[1]].detail == "drained in Slurm"
    assert slurm.state(job) == "RUNNING"  # Slurm decides; nothing was killed
    # Nothing new starts on a drained node: a new job waits.
    waiting = slurm.sbatch("--wrap", "true")
    assert slurm.wait(lambda: slurm.state(waiting) == "PENDING", 5)
    slurm.run("scancel", job)
    assert slurm.wait(lambda: node_states(slurm.runner)[NODES[0]] == "drained", 30)


def test_a_second_drain_changes_nothing(slurm):
    drain(slurm.runner, list(NODES), REASON)
    again = drain(slurm.runner, list(NODES), "rackform reap: a later run")
    assert all(o.ok and o.detail == "already drained in Slurm" for o in again), again
    assert reasons(slurm) == {n: REASON for n in NODES}  # the first drain's reason stands


def test_each_node_has_its_own_outcome(slurm):
    got = drain(slurm.runner, [NODES[0], "gpu-b9"], REASON)
    assert [(o.subject, o.ok) for o in got] == [(NODES[0], True), ("gpu-b9", False)]
    assert "not a node of the controller's Slurm" in got[1].detail


def test_slurmctld_down_fails_every_node_with_why(slurm):
    with slurm.controller_down():
        got = drain(slurm.runner, list(NODES), REASON)
    assert [o.ok for o in got] == [False, False]
    assert all(o.detail.startswith("cannot read its state in Slurm: ") for o in got), got
    assert all("Unable to contact slurm controller" in o.detail for o in got), got
    assert set(node_states(slurm.runner).values()) == {"idle"}


def test_an_unreadable_node_state_is_a_remote_error(slurm, tmp_path):
    (tmp_path / "sh").symlink_to(shutil.which("sh"))  # a host with a shell and no Slurm
    with pytest.raises(RemoteError, match=r"sinfo failed on this machine: .*sinfo: not found"):
        node_states(Local({**slurm.env, "PATH": str(tmp_path)}))
