"""End to end: the slurm role makes the testbed's two VMs a Slurm cluster (the session's
fixtures: tests/e2e/conftest.py): slurmctld on node1, slurmd on both, munge with node1's key.
`sinfo` shows both nodes idle, a two-node `srun` runs on both with each task's checkpoint
directory made by the prolog, and a second converge changes nothing. The VMs have no GPUs: the
GRES lines are tested on the rendered files (tests/roles/test_slurm_config.py); preemption end to
end is not run yet."""

from __future__ import annotations

import pytest
import yaml
from vms import blueprint, cli, sh, shown, summary

pytestmark = pytest.mark.slow

SCHEDULER = {
    "type": "slurm",
    "controller": "node1",
    "partitions": [
        {"name": "main", "node_groups": ["vms"], "default": True, "priority_tier": 10},
        {"name": "low", "node_groups": ["vms"], "priority_tier": 1, "preemptible": True},
    ],
}


def test_the_vms_form_a_slurm_cluster_that_runs_a_two_node_job(testbed, apt_repo, phases, tmp_path):
    bed = testbed
    bp = blueprint(bed, tmp_path)
    doc = yaml.safe_load(bp.read_text())
    doc["scheduler"] = SCHEDULER
    bp.write_text(yaml.safe_dump(doc, sort_keys=False))
    key = ["--private-key", bed.key, "--known-hosts", bed.known_hosts]

    with phases("slurm: converge munge, slurmctld and slurmd on both VMs"):
        proc = cli("configure", bp, *key, "--role", "slurm")
    assert proc.returncode == 0, shown(proc)
    # The key never shows: its tasks are no_log, and the copy is decoded on the node.
    keys = {n: sh(bed, n, "sha256sum /etc/munge/munge.key; stat -c '%a %U' /etc/munge/munge.key")
            for n in ("node1", "node2")}  # fmt: skip
    assert keys["node1"] == keys["node2"], keys
    assert keys["node1"].splitlines()[1] == "400 munge"
    key_bytes = sh(bed, "node1", "base64 -w0 /etc/munge/munge.key").strip()
    assert key_bytes and key_bytes not in proc.stdout + proc.stderr

    states = sh(bed, "node1", "sinfo --noheader --Node --format='%N %P %T'").split("\n")
    assert sorted(line for line in states if line) == [
        "node1 low idle", "node1 main* idle", "node2 low idle", "node2 main* idle",
    ], states  # fmt: skip

    with phases("slurm: a two-node srun"):
        out = sh(
            bed,
            "node1",
            "srun --nodes=2 --ntasks-per-node=1 --label --time=2"
            " sh -c 'echo $(hostname) $RACKFORM_CHECKPOINT_DIR; test -d \"$RACKFORM_CHECKPOINT_DIR\"'",
        )
    rows = sorted(line.split(": ", 1)[1].split() for line in out.splitlines() if ": " in line)
    assert [r[0] for r in rows] == ["node1", "node2"], out
    job_dirs = {r[1] for r in rows}
    assert len(job_dirs) == 1 and job_dirs.pop().startswith("/mnt/checkpoints/slurm/"), out

    with phases("slurm: converge again (changes nothing)"):
        again = cli("configure", bp, *key, "--role", "slurm")
    assert again.returncode == 0, shown(again)
    assert {h: row["changed"] for h, row in summary(again.stdout).items()} == {
        "node1": 0, "node2": 0,
    }, shown(again)  # fmt: skip
