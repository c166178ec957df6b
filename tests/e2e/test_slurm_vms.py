"""End to end: the slurm role makes the testbed's two VMs a Slurm cluster (the session's
fixtures: tests/e2e/conftest.py): slurmctld on node1, slurmd on both, munge with node1's key.
One converge (slurm and smoke_train, this file's module fixture) sets it up and runs the smoke
job through it; the tests then use that cluster:

- `sinfo` shows both nodes idle, a two-node `srun` runs on both with each task's checkpoint
  directory made by the prolog, every finished job has its line in the job records
  (jobcomp), and a second converge changes nothing;
- the smoke job ran as one Slurm job over both nodes (sbatch, then srun starting the launcher
  on each), and each node's report names that job and what Slurm allocated;
- preemption that resumes, and a spot interruption: a low-priority job holding both nodes
  (validators.resumable, CPU torch over gloo) is preempted by a high-priority one, requeued,
  and resumes from the checkpoint it wrote on SIGTERM; then an EC2 Spot interruption notice,
  served on node2's loopback by a stand-in for the instance metadata service
  (tests/fake_imds.py), makes the spot agent drain node2, signal the job to checkpoint and
  requeue it; once node2 is back (as its replacement would be), the job resumes from that
  checkpoint, written after the notice, and trains to its last step with the loss going on
  from where it was.

The VMs have no GPUs: the GRES lines are tested on the rendered files
(tests/roles/test_slurm_config.py). To keep the e2e short, the cluster requeues a job 10 s after
it stops (slurm_cred_expire_s; Slurm's default 120 s), a preempted job has 10 s of GraceTime,
and the agent looks every second and requeues 2 s after its checkpoint signal."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from vms import MOUNT, TORCH, blueprint, cli, sh, shown, summary

from rackform.testbed import lifecycle
from rackform.validation.cluster import merge_reports, read_reports

pytestmark = pytest.mark.slow

SCHEDULER = {
    "type": "slurm",
    "controller": "node1",
    "partitions": [
        {"name": "main", "node_groups": ["vms"], "default": True, "priority_tier": 10},
        {"name": "low", "node_groups": ["vms"], "priority_tier": 1, "preemptible": True},
    ],
    "preemption": {"mode": "requeue", "grace_s": 10},
}
IMDS_PORT = 8169
NOTICE = "/run/fake-imds/notice.json"
FAKE_IMDS = Path(__file__).resolve().parents[1] / "fake_imds.py"
SLURM_VARS = [
    "-x", "slurm_cred_expire_s=10",
    "-x", "slurm_spot_agent=true",
    "-x", f"slurm_spot_agent_imds_url=http://127.0.0.1:{IMDS_PORT}",
    "-x", "slurm_spot_agent_interval_s=1",
    "-x", "slurm_spot_agent_requeue_after_s=2",
]  # fmt: skip


def smoke_vars(wheel_server: int) -> list[str]:
    """torch from the wheel server, and the smoke job the configure e2e runs (10 steps of the
    tiny model at 4 x 32 tokens: floating point is emulated under TCG)."""
    return [
        "-x", f'smoke_train_pip_find_links=["http://10.0.2.2:{wheel_server}/"]',
        "-x", "smoke_train_pip_no_index=true",
        "-x", 'smoke_train_pip_trusted_hosts=["10.0.2.2"]',
        "-x", "smoke_train_pip_compile=false",
        "-x", "smoke_train_storage_probe_mb=64",
        "-x", "smoke_train_steps=10",
        "-x", 'smoke_train_model_args=["--batch", "4", "--seq-len", "32", "--lr", "0.006"]',
    ]  # fmt: skip


@dataclass
class Cluster:
    bed: lifecycle.Testbed
    converge: list  # `rackform configure` arguments of the converge, but the roles
    first: object  # its CompletedProcess
    reports: Path


# Each VM as this file needs it, whatever ran on it before: the metadata stand-in on loopback
# (no notice yet), and a mounted checkpoint directory (a tmpfs unless the array is mounted:
# storage is not what this file tests).
PREPARE = (
    "systemctl stop fake-imds 2>/dev/null; systemctl reset-failed fake-imds 2>/dev/null;"
    " rm -rf /run/fake-imds;"
    f" systemd-run --quiet --unit=fake-imds python3 /root/fake_imds.py --port {IMDS_PORT}"
    f" --notice {NOTICE};"
    f" mkdir -p {MOUNT}; mountpoint -q {MOUNT} || mount -t tmpfs -o size=512m slurm-e2e {MOUNT}"
)
RESTORE = (
    "systemctl stop fake-imds 2>/dev/null; rm -rf /run/fake-imds;"
    f" if findmnt -n -o SOURCE {MOUNT} | grep -qx slurm-e2e; then umount {MOUNT}; fi; true"
)


@pytest.fixture(scope="module")
def cluster(testbed, apt_repo, wheel_server, phases, tmp_path_factory):
    if wheel_server is None:
        pytest.fail(f"no torch {TORCH} CPU wheel on this machine for the smoke job through Slurm")
    bed, tmp = testbed, tmp_path_factory.mktemp("slurm")
    bp = blueprint(bed, tmp)
    doc = yaml.safe_load(bp.read_text())
    doc["scheduler"] = SCHEDULER
    bp.write_text(yaml.safe_dump(doc, sort_keys=False))
    reports = tmp / "reports"
    converge = [bp, "--private-key", bed.key, "--known-hosts", bed.known_hosts,
                "--report-dir", reports, *SLURM_VARS, *smoke_vars(wheel_server)]  # fmt: skip
    for node in ("node1", "node2"):
        bed.ssh(node).run(f"cat > /root/fake_imds.py; {PREPARE}", input=FAKE_IMDS.read_text())
    try:
        with phases("slurm: converge slurm and smoke_train; the smoke job through Slurm"):
            first = cli("configure", *converge, "--role", "slurm", "--role", "smoke_train")
        yield Cluster(bed, converge, first, reports)
    finally:
        sh(bed, "node1", "scancel --user=root; scontrol update nodename=node1,node2 state=resume",
           check=False)  # fmt: skip
        for node in ("node1", "node2"):
            sh(bed, node, RESTORE, check=False)


def test_the_vms_form_a_slurm_cluster_that_runs_a_two_node_job(cluster, phases):
    bed, proc = cluster.bed, cluster.first
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

    # smoke_train's second converge is the configure e2e's (tests/e2e/test_configure_vms.py).
    with phases("slurm: converge the slurm role again (changes nothing)"):
        again = cli("configure", *cluster.converge, "--role", "slurm")
    assert again.returncode == 0, shown(again)
    assert {h: row["changed"] for h, row in summary(again.stdout).items()} == {
        "node1": 0, "node2": 0,
    }, shown(again)  # fmt: skip


def job_record(bed: lifecycle.Testbed, job: str, state: str = "") -> dict[str, str]:
    """The job's last line in the job completion log (with `state`, its last in that state)."""
    lines = sh(
        bed, "node1", f"grep -E '^JobId={job} .*JobState={state}' /var/log/slurm/jobcomp.log"
    )
    return dict(w.split("=", 1) for w in lines.splitlines()[-1].split() if "=" in w)


def test_the_smoke_job_ran_as_one_slurm_job_over_both_nodes(cluster):
    proc = cluster.first
    assert proc.returncode == 0, shown(proc)
    assert "Submit the smoke job to Slurm, once" in proc.stdout
    reports = read_reports(cluster.reports)
    assert set(reports) == {"node1", "node2"}
    for node, doc in reports.items():
        assert doc["ok"] and doc["complete"], (node, doc["checks"])
        s = doc["slurm"]
        assert (s["node"], s["nodes"], s["nodelist"], s["partition"]) == (
            node,
            2,
            "node[1-2]",
            "main",
        )
        assert s["gpus_per_node"] == 0  # the VMs have none: no GRES asked
    merged = merge_reports(["node1", "node2"], reports, 0)
    gang = next(c for c in merged["checks"] if c["name"] == "slurm_allocation")
    assert gang["status"] == "pass", gang
    job = merged["slurm"]["job_id"]
    record = job_record(cluster.bed, job)
    assert record["JobState"] == "COMPLETED" and record["Name"].startswith("rackform-smoke-")


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


def until(bed, condition: str, what: str, timeout: int = 300) -> str:
    """Wait on node1 (one SSH session, polling there every second) until the shell condition
    holds; its time in seconds."""
    out = (
        bed.ssh("node1")
        .run(
            f"t=0; until {condition}; do sleep 1; t=$((t+1));"
            f" if [ $t -ge {timeout} ]; then echo TIMEOUT; exit 0; fi; done; echo $t",
            timeout=timeout + 60,
        )
        .stdout
    )
    assert "TIMEOUT" not in out, f"{what}: not within {timeout} s\n" + sh(
        bed, "node1", "squeue; sinfo -N; tail -30 /root/resumable-*.out", check=False
    )
    return out.strip()


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
