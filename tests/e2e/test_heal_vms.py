"""End to end: `rackform heal --apply` finds a broken node of the testbed's two-node Slurm
cluster (the `cluster` fixture, tests/e2e/conftest.py) from its node_exporter and repairs it
under a job that holds both VMs.

node_exporter is the `dcgm` role's (on every node, GPUs or not; the configure e2e installs it,
this file converges the role itself when run alone); Prometheus on this machine scrapes it on
both VMs with the labels the role's scrape config gives (the VMs are reached through an SSH
forward each, kept up across node2's reboot). The VMs have no GPUs: heal sees them by
node_exporter and judges them on its series.

1. Both nodes healthy: a dry run says so and does nothing (exit 0).
2. An elastic job over both VMs (issue 61): the rolling e2e's counting loop (a checkpoint on
   each node's disk after every step, no torch; held at its end until heal is done, so that it
   is running when heal acts however slow the machine), shaped as the elastic launcher shapes
   its job (validators/elastic.py): `--no-kill`, one job step per node, and the launcher's mark
   in the job's comment (`rackform-elastic:min=1`: it may go on with one node). node2's
   checkpoint filesystem goes read-only (the kernel does that to a filesystem after I/O
   errors), and node_exporter reports it.
3. `heal --apply` (the blueprint's policy: reboot for a storage fault): node2 failed, node1
   healthy and untouched; node2 drained through Slurm, and the job, rather than requeued to
   wait for a whole allocation again, goes on at reduced size (Slurm shrinks it off node2:
   `scontrol update JobId= NodeList=node1`, rackform/lifecycle/elastic.py); node2 rebooted (a
   new boot id), re-validated alone (host checks and a one-node smoke job with torch, the extra
   variables the last configuration applied) while node1 goes on counting, returned to
   service. The job ends on node1 in its first run, never requeued; a dry run after says both
   nodes are healthy again. (A requeue under heal is the same drain's other branch: tested
   against the local Slurm, tests/lifecycle/test_elastic_release.py, and on the VMs by the
   rolling scenario.)

The decisions (budget, breaker, retries, a kill mid-remediation) are tested against the local
Slurm without VMs (tests/health/); `replace` on AWS against moto's server (tests/health/
test_heal_aws.py).

Its share of the suite's budget: about 2.5 minutes (the reboot and the one-node smoke job; the
elastic job costs nothing more than the plain one did). Not shown here: torch's elastic
rendezvous going on from a checkpoint after the loss (tests/validators/test_elastic_slurm.py,
on the local Slurm), a node powered off rather than failed in place, and the job taken back at
full size once node2 returns (the launcher requeues itself at a checkpoint; this job is a shell
loop)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from loopback import free_port
from servers import scraping, wait_for
from slurm_helpers import SLURM_VARS, job_record, slurm_blueprint, smoke_vars, until
from test_rolling_vms import COUNT, HOLD, STEPS, _extras
from vms import MOUNT, cli, sh, shown

from rackform.engine import prepare
from rackform.lifecycle.record import Store
from rackform.rollout.plan import basis
from rackform.scheduler.remote import ssh_argv
from validators.elastic import ELASTIC_MARK

pytestmark = pytest.mark.slow

POLICY = {"health": {"actions": {"storage": "reboot"}, "validate_minutes": 15}}
EXPORTER = "systemctl is-active -q prometheus-node-exporter"
BOOT_ID = "cat /proc/sys/kernel/random/boot_id"
# node2's checkpoint filesystem for this scenario: a tmpfs as the Slurm scenarios use, in fstab
# so that it is there again after heal's reboot. Whatever was mounted there goes first (detached
# lazily): in the whole suite node2's array is broken for good by then (the configure e2e pulls
# a member off the PCI bus), and a broken array can neither be remounted read-only nor mounted
# again at boot. Its fstab comes back at the end; the tmpfs goes.
FSTAB_LINE = f"slurm-e2e {MOUNT} tmpfs size=512m,nofail 0 0"
UNMOUNT = f"for i in 1 2 3 4; do mountpoint -q {MOUNT} || break; umount -l {MOUNT}; done"
TAKE_MOUNT = (
    f"cp /etc/fstab /root/fstab.heal-e2e && {UNMOUNT}"
    f" && sed -i '\\#[[:space:]]{MOUNT}[[:space:]]#d' /etc/fstab"
    f" && echo '{FSTAB_LINE}' >> /etc/fstab && mkdir -p {MOUNT} && mount {MOUNT}"
)
GIVE_BACK = f"{UNMOUNT}; [ -f /root/fstab.heal-e2e ] && mv /root/fstab.heal-e2e /etc/fstab; true"


# The rolling e2e's job, shaped as validators/elastic.py shapes the elastic resumable job: kept
# by Slurm when a node fails (--no-kill), one step per node (a step over both would end whole
# with either), and the launcher's mark (its ELASTIC_MARK with the job's minimum).
ELASTIC_JOB = f"""#!/bin/bash
#SBATCH --job-name=elastic --partition=main --nodes=2 --ntasks-per-node=1 --time=30
#SBATCH --no-kill --requeue --open-mode=append --output=/root/elastic-%j.out
#SBATCH --comment={ELASTIC_MARK}1
for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
  srun --nodes=1 --ntasks=1 --nodelist="$n" bash /root/count.sh &
done
wait
"""


def went_on(out: str) -> None:
    """node1's rank ran once, from 0, and counted to the end; node2's was stopped before the
    end by the shrink; nothing was run again (no requeue)."""
    lines = [line.split() for line in out.splitlines()]
    runs = {n: [w for w in lines if w[:2] == [n, "from"]] for n in ("node1", "node2")}
    assert [w[2:] for w in runs["node1"]] == [["0", "restart", "0"]], out
    assert [w[2:] for w in runs["node2"]] == [["0", "restart", "0"]], out
    assert ["node1", "done", str(STEPS)] in lines, out
    assert not any(w[:2] == ["node2", "done"] for w in lines), out


def heal_blueprint(bed, tmp: Path) -> Path:
    path = slurm_blueprint(bed, tmp)
    doc = yaml.safe_load(path.read_text())
    doc["lifecycle"] = {**POLICY, "max_out_of_service": 1}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@contextmanager
def forwarded(bed, nodes: list[str], remote_port: int = 9100):
    """127.0.0.1:<port> on this machine to each VM's node_exporter, through SSH: a forward that
    drops (its VM rebooting) is opened again every second until the block ends."""
    ports = {n: free_port() for n in nodes}
    done = threading.Event()
    procs: dict[str, subprocess.Popen] = {}

    def keep(node: str) -> None:
        ssh = bed.ssh(node)
        argv = ssh_argv(ssh.user, ssh.host, ssh.port, [
            *ssh.options(), "-N", "-o", "ExitOnForwardFailure=yes",
            "-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=2",
            "-L", f"127.0.0.1:{ports[node]}:127.0.0.1:{remote_port}",
        ])  # fmt: skip
        while not done.is_set():
            procs[node] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            while procs[node].poll() is None and not done.is_set():
                done.wait(0.5)
            done.wait(1)

    threads = [threading.Thread(target=keep, args=(n,), daemon=True) for n in nodes]
    for t in threads:
        t.start()
    try:
        yield ports
    finally:
        done.set()
        for p in procs.values():
            p.terminate()
        for t in threads:
            t.join(timeout=10)


def scrape_config(plan, ports: dict[str, int]) -> str:
    """The dcgm role's `node` job as it writes it, with each VM's forward as its target."""
    return yaml.safe_dump([{
        "job_name": "node",
        "static_configs": [
            {"targets": [f"127.0.0.1:{port}"],
             "labels": {"cluster": plan.name, "environment": plan.environment,
                        "purpose": plan.purpose, "node": node}}
            for node, port in ports.items()
        ],
    }], sort_keys=False)  # fmt: skip


def heal(bp: Path, url: str, *more) -> tuple[subprocess.CompletedProcess, dict]:
    # The blueprint's other environments (wipe, gpu) are other clusters, never scraped here.
    r = cli("heal", bp, "--env", "default", "--prometheus", url, "--json", *more)
    return r, (json.loads(r.stdout) if r.stdout.strip() else {})


def verdicts(doc: dict) -> dict[str, tuple[str, str]]:
    return {n["node"]: (n["verdict"], n["action"]) for n in doc["clusters"][0]["nodes"]}


def test_a_node_whose_checkpoint_filesystem_fails_is_drained_rebooted_revalidated_returned(
    cluster, wheel_server, phases, tmp_path
):
    bed = cluster.bed
    nodes = ["node1", "node2"]
    bp = heal_blueprint(bed, tmp_path)
    plan = prepare(bp).plan
    state, reports = tmp_path / "state", tmp_path / "reports"
    access = ["--private-key", bed.key, "--known-hosts", bed.known_hosts,
              "--state-dir", state, "--report-dir", reports]  # fmt: skip
    # What the nodes run, as the last full configure recorded it (the configure e2e's to show):
    # heal's re-validation runs the smoke job with these variables (torch from the wheel server).
    base = [*SLURM_VARS, *smoke_vars(wheel_server)]
    was = basis(plan, _extras(base))
    Store(state, plan.stack).set_applied(dict(was.variables), dict(was.nodes), plan.digest)
    if not all(sh(bed, n, f"{EXPORTER} && echo yes", check=False).strip() for n in nodes):
        with phases("heal: node_exporter from the dcgm role (this file run alone)"):
            r = cli("configure", bp, "--role", "dcgm", *access[:4], "--report-dir", reports)
        assert r.returncode == 0, shown(r)
    for n in nodes:
        sh(bed, n, EXPORTER)
    sh(bed, "node2", TAKE_MOUNT)
    sh(bed, "node1", f"cat > /root/elastic.sbatch <<'EOF'\n{ELASTIC_JOB}EOF")
    for n in nodes:
        sh(bed, n, f"cat > /root/count.sh <<'EOF'\n{COUNT}EOF")
        sh(bed, n, f"touch {HOLD}")  # the job ends only once heal is done (removed below)
    boot = {n: sh(bed, n, BOOT_ID).strip() for n in nodes}
    sel = f'cluster="{plan.name}",environment="{plan.environment}"'
    try:
        with forwarded(bed, nodes) as ports, scraping(scrape_config(plan, ports), tmp_path / "prom") as url:  # fmt: skip
            wait_for(url, f"node_boot_time_seconds{{{sel}}}", 2, "both VMs' node_exporter")
            # 1. Healthy: nothing to do.
            r, doc = heal(bp, url)
            assert r.returncode == 0, shown(r)
            assert verdicts(doc) == {n: ("healthy", "none") for n in nodes}, doc

            # 2. An elastic job over both nodes; node2's checkpoint filesystem read-only.
            job = sh(bed, "node1", "sbatch --parsable /root/elastic.sbatch").strip()
            until(bed, f"[ $(cat /var/tmp/rolling-{job} 2>/dev/null || echo 0) -ge 3 ]", "steps")
            sh(bed, "node2", f"mount -o remount,ro {MOUNT}")
            ro = f'node_filesystem_readonly{{{sel},node="node2",mountpoint="{MOUNT}"}} == 1'
            wait_for(url, ro, 1, "node2's read-only checkpoint filesystem")

            # 3. Healed.
            t0 = time.time()
            with phases("heal: node2 drained, rebooted, re-validated alone, returned"):
                r, doc = heal(bp, url, "--apply", *access)
            assert r.returncode == 6, shown(r)  # what it found: node2 failed
            assert verdicts(doc) == {
                "node1": ("healthy", "none"), "node2": ("failed", "reboot"),
            }, doc  # fmt: skip
            evidence = doc["clusters"][0]["nodes"][1]["evidence"]
            assert evidence[0]["detail"] == f"the checkpoint filesystem {MOUNT} is read-only"
            (action,) = doc["clusters"][0]["actions"]
            assert (action["node"], action["action"], action["status"]) == (
                "node2", "reboot", "done",
            ), shown(r)  # fmt: skip
            # The elastic job went on at reduced size on node1: not requeued.
            assert [(str(j["job"]), j["how"], j["nodes"]) for j in action["jobs"]] == [
                (job, "reduced", ["node1"])
            ], shown(r)
            # node2 rebooted; node1 never touched.
            assert sh(bed, "node2", BOOT_ID).strip() != boot["node2"]
            assert sh(bed, "node1", BOOT_ID).strip() == boot["node1"]
            state_now = sh(bed, "node1", "sinfo --noheader --nodes=node2 --format=%T").strip()
            assert not any(w in state_now for w in ("drain", "down")), state_now
            for n in nodes:  # the job, on node1 alone, may end now
                sh(bed, n, f"rm -f {HOLD}")
            until(
                bed, f"! squeue --noheader --jobs={job} | grep -q .", "the job's end", timeout=180
            )
            # Judged again, node2 scraped since its reboot (its checkpoint filesystem mounted rw).
            booted = f'node_boot_time_seconds{{{sel},node="node2"}} > {t0:.0f}'
            wait_for(url, booted, 1, "node2's node_exporter since its reboot")
            r, doc = heal(bp, url)
            assert r.returncode == 0, shown(r)
    finally:
        for n in nodes:
            sh(bed, n, f"rm -f {HOLD}", check=False)
        sh(bed, "node2", GIVE_BACK, check=False)
        sh(bed, "node1", "scontrol update nodename=node1,node2 state=resume", check=False)

    # The job went on without node2 and ended on node1 in its first run: never requeued.
    went_on(sh(bed, "node1", f"cat /root/elastic-{job}.out"))
    record = job_record(bed, job)
    assert (record["JobState"], record["NodeList"]) == ("COMPLETED", "node1"), record
    found = sorted(reports.glob("validate-node2-*/*/node2.json"))
    assert found, sorted(reports.rglob("*"))
    took = json.loads(found[-1].read_text()).get("launch_s") or {}
    phases.notes.append(f"heal: node2's re-validation, the node's own seconds: {took}")
