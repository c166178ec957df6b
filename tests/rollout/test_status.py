"""`rackform status`: each node's lifecycle state from Slurm's states and reasons and the stack's
records. The rules on the states sinfo prints (suffixes, reasons of every kind), then the real
command against the local Slurm through the ssh seam."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from blueprint_helpers import ROOT
from slurm_local import NODES, blueprint, ssh_env

from rackform.lifecycle.record import Store, new_record
from rackform.lifecycle.status import node_status, progress


def rec(statuses: list[str], status: str = "stopped"):
    r = new_record(
        "s-default",
        "sha256:" + "ab" * 32,
        "drain",
        [[f"n{i}"] for i in range(len(statuses))],
        {},
        {},
    )
    for b, s in zip(r.batches, statuses, strict=True):
        b.status = s
    r.status = status
    return r


@pytest.mark.parametrize(
    ("slurm", "rollout", "heal", "state"),
    [
        (("idle", "none"), None, None, "in service"),
        (("mixed", "(null)"), None, None, "in service"),
        (("idle*", "none"), None, None, "in service"),  # not responding yet after a resume
        (("drained", "bad PSU, ticket 4411"), None, None, "drained"),
        (("draining", "kernel update (bob)"), None, None, "draining"),
        (("down*", "Not responding"), None, None, "down"),
        (("drained*", "rackform rollout abababababab batch 1"), rec(["drained"]), None, "down"),
        (("drained", "rackform rollout abababababab batch 1"), rec(["drained"]), None, "in maintenance"),
        (("draining", "rackform rollout abababababab batch 1"), rec(["pending"], "running"), None, "in maintenance"),
        (("drained", "rackform rollout abababababab batch 1"), rec(["applied"]), None, "validating"),
        (("drained", "rackform rollout abababababab batch 1"), rec(["failed"]), None, "quarantined"),
        (("drained", "rackform heal abababababab batch 1"), None, rec(["validated"]), "in maintenance"),
        (("drained", "rackform heal: GPU 1: XID 79"), None, None, "quarantined"),
        (("drained", "rackform rollout abababababab batch 1"), rec(["failed"], "abandoned"), None, "quarantined"),
        (("", ""), None, None, "unknown"),
    ],
)  # fmt: skip
def test_a_nodes_state(slurm, rollout, heal, state):
    (n,) = node_status(["n0"], {"n0": slurm} if slurm[0] else {}, rollout, heal)
    assert n.state == state, n


def test_progress_says_where_a_rollout_stands():
    assert progress(rec(["done", "failed", "pending"])) == {
        "status": "stopped", "digest": "sha256:" + "ab" * 32, "class": "drain", "batches": 3,
        "done": 1, "at": 2,
    }  # fmt: skip
    assert progress(None) is None


def status(bp, env, state):
    return subprocess.run(
        [sys.executable, "-m", "rackform", "status", str(bp), "--json", "--state-dir", str(state)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip


def test_the_command_on_a_cluster_with_a_stopped_rollout(slurm, tmp_path):
    bp = tmp_path / "slurm-a.yaml"
    bp.write_text(blueprint())
    store = Store(tmp_path / "state", "slurm-a-default")
    r = new_record(
        "slurm-a-default", "sha256:" + "cd" * 32, "reboot", [[NODES[0]], [NODES[1]]], {}, {}
    )
    r.batches[0].status, r.batches[0].why = "failed", "validation: smoke job failed"
    r.status, r.why = "stopped", "batch 1 failed: validation: smoke job failed"
    store.write(r)
    slurm.run("scontrol", "update", f"nodename={NODES[0]}", "state=drain",
              "reason=rackform rollout cdcdcdcdcdcd batch 1")  # fmt: skip
    p = status(bp, ssh_env(slurm, tmp_path), tmp_path / "state")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    nodes = {n["node"]: n for n in doc["nodes"]}
    assert (
        nodes[NODES[0]]["state"] == "quarantined"
        and nodes[NODES[0]]["batch"] == "rollout batch 1 (failed)"
    )
    assert nodes[NODES[1]]["state"] == "in service"
    assert doc["rollout"]["at"] == 1 and doc["rollout"]["why"].startswith("batch 1 failed")
    assert doc["heal"] is None


def test_slurm_unread_is_exit_3_with_the_records(slurm, tmp_path):
    bp = tmp_path / "slurm-a.yaml"
    bp.write_text(blueprint())
    p = status(bp, ssh_env(slurm, tmp_path, fail=True), tmp_path / "state")
    assert p.returncode == 3
    doc = json.loads(p.stdout)
    assert "not reachable over SSH" in doc["error"] and all(
        n["state"] == "unknown" for n in doc["nodes"]
    )


def test_the_command_shows_a_rollout_an_earlier_release_stopped(slurm, tmp_path):
    """Neither variable set and no --state-dir: the record an earlier release kept in
    ~/.rackform/rollout is found where it is, and nothing is moved or made."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    env = {**ssh_env(slurm, tmp_path), "HOME": str(home)}
    env.pop("RACKFORM_ROLLOUT_DIR", None)
    env.pop("RACKFORM_REAP_DIR", None)
    bp = tmp_path / "slurm-a.yaml"
    bp.write_text(blueprint())
    r = new_record(
        "slurm-a-default", "sha256:" + "cd" * 32, "reboot", [[NODES[0]], [NODES[1]]], {}, {}
    )
    r.batches[0].status, r.batches[0].why = "failed", "validation: smoke job failed"
    r.status, r.why = "stopped", "batch 1 failed: validation: smoke job failed"
    Store(home / ".rackform" / "rollout", "slurm-a-default").write(r)
    slurm.run("scontrol", "update", f"nodename={NODES[0]}", "state=drain",
              "reason=rackform rollout cdcdcdcdcdcd batch 1")  # fmt: skip
    p = subprocess.run(
        [sys.executable, "-m", "rackform", "status", str(bp), "--json"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    nodes = {n["node"]: n for n in doc["nodes"]}
    assert nodes[NODES[0]]["state"] == "quarantined"
    assert nodes[NODES[0]]["batch"] == "rollout batch 1 (failed)"
    assert doc["rollout"]["status"] == "stopped" and doc["rollout"]["at"] == 1
    assert not (home / ".rackform" / "lifecycle").exists()
