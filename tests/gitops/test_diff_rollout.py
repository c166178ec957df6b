"""`rackform diff` on a software change, in a real git repository: the `rollout` object a pipeline
reads (whether it rolls, the roles, the batches by rack, the expected time) and the line a
reviewer reads in the PR comment; a change that needs no drain says it applies in place, and a
change to no node's software carries no rollout at all."""

from __future__ import annotations

import json
from pathlib import Path

from gitrepo import commit, make_remote

from rackform.engine import prepare
from rackform.lifecycle.record import Store

ROOT = Path(__file__).resolve().parents[2]
SLURM = (ROOT / "blueprints" / "baremetal-slurm.yaml").read_text()
PATH = "blueprints/baremetal-slurm.yaml"


def diff(rackform, tmp_path, new_text: str):
    _, work = make_remote(tmp_path, {PATH: SLURM})
    commit(work, "change", {PATH: new_text})
    proc = rackform("diff", "--base", "HEAD~1", "--json", cwd=work)
    assert proc.returncode == 0, proc.stderr
    (bp,) = json.loads(proc.stdout)["blueprints"]
    envs = {e["environment"]: e for e in bp["environments"]}
    md = rackform("diff", "--base", "HEAD~1", cwd=work)
    assert md.returncode == 0, md.stderr
    return envs, md.stdout


def test_a_driver_branch_rolls_rack_by_rack_with_a_canary(rackform, tmp_path):
    text = SLURM.replace(
        "lifecycle:\n  protect: true", "lifecycle:\n  protect: true\n  max_out_of_service: '50%'"
    )
    assert text != SLURM
    _, work = make_remote(tmp_path, {PATH: text})
    commit(
        work,
        "driver 560",
        {PATH: text.replace("storage:", "software: {driver_branch: '560'}\nstorage:", 1)},
    )
    proc = rackform("diff", "--base", "HEAD~1", "--json", cwd=work)
    assert proc.returncode == 0, proc.stderr
    (bp,) = json.loads(proc.stdout)["blueprints"]
    envs = {e["environment"]: e for e in bp["environments"]}
    r = envs["default"]["rollout"]
    assert r["rolls"] and r["drain"] and r["reboot"] and r["roles"] == ["nvidia_driver"]
    # Racks r1 (hgx-01, hgx-02) and r2 (hgx-03, hgx-04); a canary, never two racks in a batch.
    assert r["batches"] == [["hgx-01"], ["hgx-02"], ["hgx-03", "hgx-04"]]
    assert r["budget"] == 2 and r["expected_minutes"] > 0 and r["jobs"] == "requeue"
    # Staging runs on two hosts of rack r1: its own rollout, with its own budget.
    assert envs["staging"]["rollout"]["batches"] == [["hgx-01"], ["hgx-02"]]
    md = rackform("diff", "--base", "HEAD~1", cwd=work).stdout
    assert "rolling: 3 batches, about" in md
    assert "🔁 **rolling**: 3 batches of up to 2 nodes, a canary node first, about" in md
    assert "  - batch 3: hgx-03, hgx-04" in md
    assert "  - the time: rackform's per-node estimates" in md


def test_the_time_is_this_clusters_own_once_a_rollout_measured_it(rackform, tmp_path):
    """The stack's last rolling change measured its drain, its driver converge with the reboot,
    and its re-validation (`--state-dir`, where `configure --rolling` keeps them): the estimate
    is made from them; a state directory without them leaves the catalog's."""
    text = SLURM.replace("storage:", "software: {driver_branch: '560'}\nstorage:", 1)
    _, work = make_remote(tmp_path, {PATH: SLURM})
    commit(work, "driver 560", {PATH: text})
    stack = prepare(ROOT / PATH).plan.stack
    state = tmp_path / "state"
    measured = {"at": 1795000000, "batches": 4, "cls": "reboot", "roles": ["nvidia_driver"],
                "drain_s": 120, "apply_s": 600, "validate_s": 240}  # fmt: skip
    Store(state, stack).set_applied({}, {}, "sha256:" + "00" * 32, measured)

    def rollout_of(*flags):
        proc = rackform("diff", "--base", "HEAD~1", "--json", *flags, cwd=work)
        assert proc.returncode == 0, proc.stderr
        (bp,) = json.loads(proc.stdout)["blueprints"]
        return {e["environment"]: e["rollout"] for e in bp["environments"]}["default"]

    guess, known = rollout_of("--state-dir", tmp_path / "empty"), rollout_of("--state-dir", state)
    assert guess["basis"].startswith("rackform's per-node estimates")
    assert known["basis"].startswith("measured by this cluster's last rolling change (2026-")
    # 2 min of drain, 10 of driver and reboot, 4 of re-validation: 16 a batch.
    assert known["expected_minutes"] == 16 * len(known["batches"])
    assert known["batches"] == guess["batches"]
    assert known["expected_minutes"] < guess["expected_minutes"]
    md = rackform("diff", "--base", "HEAD~1", "--state-dir", state, cwd=work).stdout
    assert "  - the time: measured by this cluster's last rolling change" in md


def test_a_dcgm_upgrade_applies_in_place(rackform, tmp_path):
    envs, md = diff(
        rackform, tmp_path, SLURM.replace("storage:", "software: {dcgm: '3.4'}\nstorage:", 1)
    )
    r = envs["default"]["rollout"]
    assert not r["rolls"] and r["batches"] == [] and r["roles"] == ["dcgm"]
    assert "- software: dcgm_version: applied on every node at once" in md


def test_a_slurm_change_names_slurms_order(rackform, tmp_path):
    envs, md = diff(rackform, tmp_path, SLURM.replace("half_life_days: 7", "half_life_days: 14"))
    r = envs["default"]["rollout"]
    assert not r["rolls"] and r["roles"] == ["slurm"] and r["class"] == "in_place"
    moved = SLURM.replace("controller: hgx-01", "controller: hgx-02")
    envs, md = diff(rackform, tmp_path / "b", moved)
    r = envs["default"]["rollout"]
    assert r["class"] == "slurm" and r["slurm_order"] == ["slurmdbd", "slurmctld", "slurmd"]
    assert "(slurmdbd → slurmctld → slurmd)" in md


def test_a_change_to_no_nodes_software_carries_no_rollout(rackform, tmp_path):
    envs, md = diff(rackform, tmp_path, SLURM.replace("tokens_b: 300", "tokens_b: 400"))
    assert envs["default"]["rollout"] is None
    assert "rolling" not in md and "- software:" not in md
