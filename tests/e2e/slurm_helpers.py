"""The Slurm cluster the testbed's two VMs form, shared by the configure e2e (its first converge
forms it, every role at once, and runs the smoke job through it) and the Slurm e2e (which uses
that cluster, or forms it itself when run alone): the blueprint's scheduler, the role variables
that keep the e2e short, the metadata stand-in each VM runs, and what the converge that formed
the cluster must show.

To keep the e2e short, the cluster requeues a job 10 s after it stops (slurm_cred_expire_s;
Slurm's default 120 s), a preempted job has 10 s of GraceTime, and the spot agent looks every
second and requeues 2 s after its checkpoint signal."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from vms import MOUNT, blueprint, sh, shown

from rackform.acceptance.cluster import merge_reports, read_reports
from rackform.testbed import lifecycle

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
IMDS_URL = f"http://127.0.0.1:{IMDS_PORT}"
NOTICE = "/run/fake-imds/notice.json"
FAKE_IMDS = Path(__file__).resolve().parents[1] / "fake_imds.py"
SLURM_VARS = [
    "-x", "slurm_cred_expire_s=10",
    "-x", "slurm_spot_agent=true",
    "-x", f"slurm_spot_agent_imds_url={IMDS_URL}",
    "-x", "slurm_spot_agent_interval_s=1",
    "-x", "slurm_spot_agent_requeue_after_s=2",
    # Slurm's health check would drain a node whose checkpoint mount the storage scenarios take
    # away, between the e2e files; it runs against the local Slurm instead
    # (tests/roles/test_slurm_health_check.py).
    "-x", "slurm_health_check_interval_s=0",
]  # fmt: skip


def smoke_vars(wheel_server: int) -> list[str]:
    """torch from the wheel server, and a smoke job sized for emulated CPUs."""
    return [
        "-x", f'smoke_train_pip_find_links=["http://10.0.2.2:{wheel_server}/"]',
        "-x", "smoke_train_pip_no_index=true",
        "-x", 'smoke_train_pip_trusted_hosts=["10.0.2.2"]',
        # Byte-compiling torch doubles its install time under TCG.
        "-x", "smoke_train_pip_compile=false",
        "-x", "smoke_train_storage_probe_mb=64",
        # Floating point is emulated under TCG: a step of the tiny model (8 x 64 tokens) takes
        # 2.4-7 s. A quarter of the tokens (4 x 32) at twice the learning rate: 10 steps still
        # drop the loss by about 0.39 (the floor is 0.2).
        "-x", "smoke_train_steps=10",
        "-x", 'smoke_train_model_args=["--batch", "4", "--seq-len", "32", "--lr", "0.006"]',
    ]  # fmt: skip


def slurm_blueprint(bed: lifecycle.Testbed, tmp: Path) -> Path:
    """The testbed's e2e blueprint (vms.blueprint) with the Slurm scheduler."""
    path = blueprint(bed, tmp)
    doc = yaml.safe_load(path.read_text())
    doc["scheduler"] = SCHEDULER
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# The metadata stand-in on a VM's loopback, started again with no notice (the spot agent the
# slurm role runs here watches it).
START_IMDS = (
    "systemctl stop fake-imds 2>/dev/null; systemctl reset-failed fake-imds 2>/dev/null;"
    " rm -rf /run/fake-imds;"
    f" systemd-run --quiet --unit=fake-imds python3 /root/fake_imds.py --port {IMDS_PORT}"
    f" --notice {NOTICE}"
)
# A mounted checkpoint directory for the Slurm scenarios' jobs, whatever ran on the VM before: a
# tmpfs unless the array is mounted (storage is not what they test), and gone again after.
MOUNT_TMPFS = (
    f"mkdir -p {MOUNT}; mountpoint -q {MOUNT} || mount -t tmpfs -o size=512m slurm-e2e {MOUNT}"
)
STOP = (
    "systemctl stop fake-imds 2>/dev/null; rm -rf /run/fake-imds;"
    f" if findmnt -n -o SOURCE {MOUNT} | grep -qx slurm-e2e; then umount {MOUNT}; fi; true"
)


def start_imds(bed: lifecycle.Testbed, node: str) -> None:
    """The metadata stand-in on the VM's loopback (no notice yet), started again."""
    bed.ssh(node).run(f"cat > /root/fake_imds.py; {START_IMDS}", input=FAKE_IMDS.read_text())


def stop(bed: lifecycle.Testbed, node: str) -> None:
    """The stand-in stopped, and the Slurm scenarios' tmpfs (if they mounted one) gone."""
    sh(bed, node, STOP, check=False)


# What a cluster this module's converge formed has, as the Slurm e2e starts from it: slurmctld on
# node1 with both nodes in both partitions; slurmd, the spot agent (watching the stand-in) and
# smoke_train's virtualenv on both.
CONTROLLER = (
    "systemctl is-active -q slurmctld"
    " && [ $(sinfo --noheader --Node --format=%N%P | sort -u | wc -l) = 4 ]"
)
EACH = (
    "systemctl is-active -q slurmd rackform-spot-agent && test -x /opt/rackform/venv/bin/python"
    f" && systemctl cat rackform-spot-agent | grep -qF -- '{IMDS_URL}'"
)


def formed(bed: lifecycle.Testbed) -> bool:
    """Whether the VMs are the Slurm cluster this module's converge forms."""
    ready = {"node1": f"{CONTROLLER} && {EACH}", "node2": EACH}
    return all(
        sh(bed, n, f"({cmd}) >/dev/null 2>&1 && echo yes", check=False).strip() == "yes"
        for n, cmd in ready.items()
    )


def job_record(bed: lifecycle.Testbed, job: str, state: str = "") -> dict[str, str]:
    """The job's last line in the job completion log (with `state`, its last in that state)."""
    lines = sh(
        bed, "node1", f"grep -E '^JobId={job} .*JobState={state}' /var/log/slurm/jobcomp.log"
    )
    return dict(w.split("=", 1) for w in lines.splitlines()[-1].split() if "=" in w)


def check_formed(bed: lifecycle.Testbed, proc: subprocess.CompletedProcess, reports: Path) -> None:
    """What the converge that formed the cluster (`proc`, its reports in `reports`) must show:
    one munge key on both nodes, never in its output; the smoke job ran as one Slurm job over
    both nodes, each node's report naming that job and what Slurm allocated, and its record in
    the job completion log."""
    assert proc.returncode == 0, shown(proc)
    # The key never shows: its tasks are no_log, and the copy is decoded on the node.
    keys = {n: sh(bed, n, "sha256sum /etc/munge/munge.key; stat -c '%a %U' /etc/munge/munge.key")
            for n in ("node1", "node2")}  # fmt: skip
    assert keys["node1"] == keys["node2"], keys
    assert keys["node1"].splitlines()[1] == "400 munge"
    key_bytes = sh(bed, "node1", "base64 -w0 /etc/munge/munge.key").strip()
    assert key_bytes and key_bytes not in proc.stdout + proc.stderr

    assert "Submit the smoke job to Slurm, once" in proc.stdout, shown(proc)
    found = read_reports(reports)
    assert set(found) == {"node1", "node2"}
    for node, doc in found.items():
        assert doc["ok"] and doc["complete"], (node, doc["checks"])
        s = doc["slurm"]
        assert (s["node"], s["nodes"], s["nodelist"], s["partition"]) == (
            node,
            2,
            "node[1-2]",
            "main",
        )
        assert s["gpus_per_node"] == 0  # the VMs have none: no GRES asked
    merged = merge_reports(["node1", "node2"], found, 0)
    gang = next(c for c in merged["checks"] if c["name"] == "slurm_allocation")
    assert gang["status"] == "pass", gang
    record = job_record(bed, merged["slurm"]["job_id"])
    assert record["JobState"] == "COMPLETED" and record["Name"].startswith("rackform-smoke-")


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
