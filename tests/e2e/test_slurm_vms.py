"""End to end: the slurm role makes the testbed's two VMs a Slurm cluster (the session's
fixtures: tests/e2e/conftest.py): slurmctld on node1, slurmd on both, munge with node1's key.
The configure e2e (tests/e2e/test_configure_vms.py) forms it: its first converge is of every
role at once, Slurm among them, and runs the smoke job through it; this file's tests use that
cluster, and form it themselves where they find none (run alone, or after files that left the
VMs otherwise): a converge of slurm and smoke_train, with the same checks of what it made
(tests/e2e/slurm_helpers.py), and a second converge of the slurm role that changes nothing (in a
whole run, the configure e2e's second converge shows that of every role). The tests:

- `sinfo` shows both nodes idle, a two-node `srun` runs on both with each task's checkpoint
  directory made by the prolog, and every finished job has its line in the job records
  (jobcomp);
- preemption that resumes, and a spot interruption: a low-priority job holding both nodes
  (validators.resumable, CPU torch over gloo) is preempted by a high-priority one, requeued,
  and resumes from the checkpoint it wrote on SIGTERM; then an EC2 Spot interruption notice,
  served on node2's loopback by a stand-in for the instance metadata service
  (tests/fake_imds.py), makes the spot agent drain node2, signal the job to checkpoint and
  requeue it; once node2 is back (as its replacement would be), the job resumes from that
  checkpoint, written after the notice, and trains to its last step with the loss going on
  from where it was.

The VMs have no GPUs: the GRES lines are tested on the rendered files
(tests/roles/test_slurm_config.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from slurm_helpers import NOTICE, job_record, until
from vms import MOUNT, cli, sh, shown, summary

pytestmark = pytest.mark.slow


def test_the_vms_form_a_slurm_cluster_that_runs_a_two_node_job(cluster, phases):
    bed = cluster.bed
    states = sh(bed, "node1", "sinfo --noheader --Node --format='%N %P %T'").split("\n")
    assert sorted(line for line in states if line) == [
        "node1 low idle", "node1 main* idle", "node2 low idle", "node2 main* idle",
    ], states  # fmt: skip

    with phases("slurm: a two-node srun"):
        out = sh(
            bed,
            "node1",
            "srun --nodes=2 --ntasks-per-node=1 --label --time=2 sh -c"
            " 'echo $(hostname) $SLURM_JOB_ID $RACKFORM_CHECKPOINT_DIR; test -d \"$RACKFORM_CHECKPOINT_DIR\"'",
        )
    rows = sorted(line.split(": ", 1)[1].split() for line in out.splitlines() if ": " in line)
    assert [r[0] for r in rows] == ["node1", "node2"], out
    job_dirs = {r[2] for r in rows}
    assert len(job_dirs) == 1 and job_dirs.pop() == f"{MOUNT}/slurm/{rows[0][1]}", out
    # Its record in the job completion log (jobcomp/filetxt on the controller).
    record = job_record(bed, rows[0][1])
    assert record["JobState"] == "COMPLETED" and record["NodeList"] == "node[1-2]", record

    # The second converge of every role, Slurm's among them, is the configure e2e's; a cluster
    # this file formed shows it for the slurm role here.
    if cluster.first is not None:
        with phases("slurm: converge the slurm role again (changes nothing)"):
            again = cli("configure", *cluster.converge, "--role", "slurm")
        assert again.returncode == 0, shown(again)
        assert {h: row["changed"] for h, row in summary(again.stdout).items()} == {
            "node1": 0, "node2": 0,
        }, shown(again)  # fmt: skip


# The low-priority job: validators.resumable over both nodes, one task per node (srun), 20 steps
# of the tiny model, a checkpoint every 4. Requeued jobs append to the same output file.
RESUMABLE = """#!/bin/sh
#SBATCH --job-name=resumable --partition=low --nodes=2 --ntasks-per-node=1 --exclusive --mem=0
#SBATCH --requeue --open-mode=append --output=/root/resumable-%j.out
export GLOO_SOCKET_IFNAME=priv0
cd /opt/rackform/smoke
srun --label /opt/rackform/venv/bin/python -m validators.resumable --steps 20 --checkpoint-every 4 \\
  --batch 4 --seq-len 32 --lr 0.006
"""


def test_a_preempted_then_spot_interrupted_job_resumes_from_its_checkpoints(cluster, phases):
    bed = cluster.bed
    sh(bed, "node1", f"cat > /root/resumable.sbatch <<'EOF'\n{RESUMABLE}EOF")
    job = sh(bed, "node1", "sbatch --parsable /root/resumable.sbatch").strip()
    ck = f"{MOUNT}/slurm/{job}"
    state = f"squeue --noheader --jobs={job} --format=%T"

    waits = {}
    with phases("slurm: a low-priority job preempted by a high-priority one, requeued, resumed"):
        waits["first checkpoint"] = until(bed, f"ls {ck} | grep -q step-", "the first checkpoint")
        high = sh(bed, "node1", "sbatch --parsable --partition=main --nodes=2 --exclusive"
                  " --wrap 'srun true'").strip()  # fmt: skip
        waits["high job's end"] = until(
            bed, f"! squeue --noheader --jobs={high} | grep -q .", "the high job's end"
        )
        waits["low job running again"] = until(
            bed, f"{state} | grep -qx RUNNING", "the low job running again"
        )
        # Its tasks have resumed (they print it before their first step).
        waits["resumed"] = until(
            bed,
            f"[ $(grep -c 'rank 0/2: from step' /root/resumable-{job}.out) -ge 2 ]",
            "the low job resumed",
        )

    with phases("slurm: a spot interruption notice on node2: drained, checkpointed, requeued,"
                " resumed once node2 is back"):  # fmt: skip
        # As EC2 does two minutes before it takes the instance (the documented item).
        at = (datetime.now(UTC) + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
        notice = {"action": "terminate", "time": at}
        noticed = float(sh(bed, "node1", "date +%s.%N"))  # the report's clock (node1's)
        sh(bed, "node2", f"mkdir -p /run/fake-imds && echo '{json.dumps(notice)}' > {NOTICE}")
        waits["node2 drained"] = until(
            bed, "sinfo --noheader --nodes=node2 --format=%T | grep -q drain", "node2 drained"
        )
        waits["requeued"] = until(bed, f"{state} | grep -qx PENDING", "the job requeued")
        reason = sh(bed, "node1", "sinfo --noheader --nodes=node2 --format=%E").strip()
        assert reason == f"spot interruption notice: terminate at {at}", reason
        # Node2's replacement comes up: the job runs again and trains to its last step.
        sh(bed, "node1", "scontrol update nodename=node2 state=resume")
        waits["end"] = until(bed, f"! {state} | grep -q .", "the job's end")
    phases.notes.append(
        "slurm: the resumable job, seconds waited for: "
        + ", ".join(f"{what} {took}" for what, took in waits.items())
    )

    doc = json.loads(sh(bed, "node1", f"cat {ck}/report.json"))
    agent = sh(bed, "node2", "journalctl -u rackform-spot-agent --no-pager -o cat")
    assert f"asked jobs {job} to checkpoint (SIGUSR1)" in agent and f"requeued jobs {job}" in agent
    assert doc["ok"] and doc["complete"] and doc["step"] == 20, doc["checks"]
    runs = [
        (r["from_step"], r["to_step"], r["ended"], r["slurm_restart_count"]) for r in doc["runs"]
    ]
    (a, b, first_end, _), (b_, c, second_end, _), (c_, last, third_end, _) = runs
    assert (a, b_, c_, last) == (0, b, c, 20) and 0 < b < c < 20, runs
    assert (first_end, second_end, third_end) == ("SIGTERM", "SIGTERM", "completed"), runs
    assert [r[3] for r in runs] == [0, 1, 2], runs  # Slurm's own count of requeues
    # Preempted: the checkpoint on SIGTERM is where the second run began.
    assert {"step": b, "why": "SIGTERM"} in [
        {k: x[k] for k in ("step", "why")} for x in doc["checkpoints"]
    ]
    # The spot notice: SIGUSR1, then the requeue's SIGTERM (2 s later here); the run after
    # resumed from a checkpoint written after the notice, so at most two minutes old when the
    # instance went. SIGUSR1 gets a checkpoint of its own when a step ends between the two; on a
    # slower machine both are pending at the same step's end and the one checkpoint is SIGTERM's
    # (the job's signal handling is tested apart, in tests/validators/test_resumable.py).
    after = [x for x in doc["checkpoints"] if x["time"] >= noticed]
    assert {x["why"] for x in after} & {"SIGUSR1", "SIGTERM"}, doc["checkpoints"]
    resume = doc["resume"]
    assert resume["from_step"] == c and resume["checkpoint_why"] in ("SIGUSR1", "SIGTERM")
    assert noticed <= resume["checkpoint_time"] <= noticed + 120, (noticed, resume)
    # The loss went on from where each run stopped, never back to the untrained start.
    losses = doc["metrics"]["losses"]
    assert len(losses) == 20 and all(losses[s] < 0.8 * losses[0] for s in (b, c)), losses
    loss = next(x for x in doc["checks"] if x["name"] == "loss_drop")
    assert loss["status"] == "pass", loss
    # Each time the job stopped and its end, in the job records.
    assert job_record(bed, job, "COMPLETED")["Partition"] == "low"
