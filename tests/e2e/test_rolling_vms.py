"""End to end: a software change rolled through the testbed's two-node Slurm cluster (the
`cluster` fixture, tests/e2e/conftest.py) one VM at a time, under a job that holds both VMs.

The job needs no torch (a shell loop that counts to its last step, a checkpoint on each node's
disk after every step, resuming from it when Slurm runs it again): it carries the requeue
mechanics; the smoke job each batch's re-validation runs is the real one (torch on the VMs).

1. A job over both VMs; the change (an NCCL setting, a variable the rollout catalog does not
   name, so it drains) is rolled while node1's checkpoint filesystem is read-only (a node the
   change breaks): the canary, node1, is drained, its job requeued, the change applied, and its
   re-validation fails. The rollout stops there (exit 4): node1 stays drained with the reason,
   node2 keeps the old setting and still runs jobs.
2. The fault cleared, the same command again resumes with node1 (applied, re-validated,
   returned), then node2; the job, requeued from its checkpoints, counts to its end, and at no
   moment sampled from Slurm's node states (every second, while both runs go on) were more
   nodes out of service than the budget (one of two).

The batch ordering, the drain decisions, rollback, a kill mid-batch and resume are tested
against the local Slurm without VMs (tests/rollout/)."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest
import yaml
from slurm_helpers import SLURM_VARS, job_record, slurm_blueprint, smoke_vars, until
from vms import MOUNT, cli, sh, shown

from rackform.engine import prepare
from rackform.lifecycle.record import Store
from rackform.rollout.plan import basis

pytestmark = pytest.mark.slow

STEPS = 30
# While this file is on a node, its rank, done counting, does not end: a test that must act on a
# running job holds it there (on a machine this slow, 30 steps can be over before it acts).
HOLD = "/root/count-hold"
# Each rank counts a second a step, its step on its own node's disk after each; run again by
# Slurm (a requeue keeps the job's id), it goes on from there.
COUNT = f"""#!/bin/bash
ck=/var/tmp/rolling-$SLURM_JOB_ID
s=$(cat $ck 2>/dev/null || echo 0)
echo "$(hostname) from $s restart ${{SLURM_RESTART_COUNT:-0}}"
trap 'echo "$(hostname) stopped at $s"; exit 143' TERM
while [ $s -lt {STEPS} ]; do
  sleep 1 & wait $!
  s=$((s+1)); echo $s > $ck.new && mv $ck.new $ck
done
while [ -e {HOLD} ]; do sleep 1 & wait $!; done
echo "$(hostname) done $s"
"""
JOB = """#!/bin/sh
#SBATCH --job-name=rolling --partition=main --nodes=2 --ntasks-per-node=1 --time=30
#SBATCH --requeue --open-mode=append --output=/root/rolling-%j.out
srun bash /root/count.sh
"""
# Slurm's node states, once a second, until the file /root/sampling goes.
SAMPLE = (
    "touch /root/sampling; rm -f /root/samples;"
    " nohup setsid sh -c 'while [ -e /root/sampling ]; do"
    ' echo "$(date +%s) $(sinfo --noheader --Node --partition=main --format=%N=%T | tr "\\n" " ")"'
    " >> /root/samples; sleep 1; done' >/dev/null 2>&1 &"
)
# A node state in which Slurm starts no job there (sinfo's long names, suffixes dropped).
OUT = ("drain", "down", "fail", "maint", "reboot", "power", "unknown", "inval")
CHANGE = "nccl_rdma_nccl_settings={NCCL_DEBUG: INFO}"
NCCL_CONF = "cat /etc/nccl.conf 2>/dev/null; true"


def nothing_lost(out: str, nodes: tuple[str, ...] = ("node1", "node2")) -> set[int]:
    """The restart counts of a COUNT job's runs, from its output, once it holds that no step was
    lost: each node's last run counted to the end, Slurm ran the job again at least once, and
    each run after the first went on from the node's checkpoint (never from 0, never back). A
    rank that was done before a requeue is run again from its end and says so again."""
    # Each run: [from, restart, the step it said it stopped at or was done at, done or -1].
    runs: dict[str, list[list[int]]] = {n: [] for n in nodes}
    for line in out.splitlines():
        w = line.split()
        if len(w) == 5 and w[0] in runs and w[1] == "from" and w[3] == "restart":
            runs[w[0]].append([int(w[2]), int(w[4]), int(w[2]), -1])
        elif len(w) == 3 and w[0] in runs and w[1] == "done" and runs[w[0]]:
            runs[w[0]][-1][2:] = [int(w[2]), int(w[2])]
        elif w[1:3] == ["stopped", "at"] and w[0] in runs and runs[w[0]]:
            runs[w[0]][-1][2] = int(w[3])
    for node, seen in runs.items():
        assert seen and seen[-1][3] == STEPS, (node, out)
        assert all(done in (-1, STEPS) for *_, done in seen), (node, out)
        assert all(start > 0 for start, restart, *_ in seen if restart > 0), (node, out)
        # A run goes on from where the one before it got to, never from before.
        assert all(b[0] >= a[2] for a, b in pairwise(seen)), (node, out)
    restarts = {restart for seen in runs.values() for _, restart, *_ in seen}
    assert max(restarts) >= 1, out
    return restarts


def _extras(args: list[str]) -> dict:
    pairs = [a for flag, a in pairwise(args) if flag == "-x"]
    return {k: yaml.safe_load(v) for k, _, v in (p.partition("=") for p in pairs)}


def _out_of_service(samples: str) -> list[tuple[int, list[str]]]:
    rows = []
    for line in samples.splitlines():
        t, *nodes = line.split()
        states = dict(n.split("=", 1) for n in nodes)
        out = [n for n, s in states.items() if any(w in s.lower() for w in OUT)]
        rows.append((int(t), sorted(out)))
    return rows


def test_a_change_rolls_one_vm_at_a_time_and_the_job_over_both_finishes(
    cluster, wheel_server, phases, tmp_path
):
    bed = cluster.bed
    bp = slurm_blueprint(bed, tmp_path)
    state = tmp_path / "state"
    base = [*SLURM_VARS, *smoke_vars(wheel_server)]
    # What the nodes run, as the last full configure recorded it (its writing is the configure
    # e2e's to show): the blueprint and these variables.
    plan = prepare(bp).plan
    was = basis(plan, _extras(base))
    Store(state, plan.stack).set_applied(dict(was.variables), dict(was.nodes), plan.digest)
    # /etc/nccl.conf as the nodes have it (none where nccl_rdma never ran: this file alone).
    conf = {n: sh(bed, n, NCCL_CONF) for n in ("node1", "node2")}
    assert not any("NCCL_DEBUG" in c for c in conf.values()), conf
    roll = [bp, "--rolling", "--state-dir", state, "--private-key", bed.key, "--known-hosts",
            bed.known_hosts, "--report-dir", tmp_path / "reports", *base, "-x", CHANGE]  # fmt: skip

    sh(bed, "node1", f"cat > /root/rolling.sbatch <<'EOF'\n{JOB}EOF")
    for n in ("node1", "node2"):
        sh(bed, n, f"cat > /root/count.sh <<'EOF'\n{COUNT}EOF")
    job = sh(bed, "node1", "sbatch --parsable /root/rolling.sbatch").strip()
    until(bed, f"[ $(cat /var/tmp/rolling-{job} 2>/dev/null || echo 0) -ge 3 ]", "the job's steps")
    sh(bed, "node1", SAMPLE)
    try:
        # 1. The canary breaks: the rollout stops after node1.
        sh(bed, "node1", f"mount -o remount,ro {MOUNT}")
        with phases("rolling: the canary (node1) fails its re-validation; the rollout stops"):
            stopped = cli("configure", *roll)
        sh(bed, "node1", f"mount -o remount,rw {MOUNT}")
        assert stopped.returncode == 4, shown(stopped)
        assert "batch 1/2 [node1]: failed: validation:" in stopped.stdout, shown(stopped)
        # A one-node batch ends at its failed host checks: its smoke job never starts.
        assert (
            "the host checks failed (checkpoint_mount, storage_write_ceiling): the job is not"
            " started" in stopped.stdout
        ), shown(stopped)
        assert "[node2]" not in stopped.stdout, shown(stopped)
        rec = json.loads((state / f"{plan.stack}.json").read_text())
        assert [(b["nodes"], b["status"]) for b in rec["batches"]] == [
            (["node1"], "failed"), (["node2"], "pending"),
        ], rec  # fmt: skip
        node1 = sh(bed, "node1", "sinfo --noheader --nodes=node1 --format='%T|%E'").strip()
        assert node1.startswith("drain") and f"rackform rollout {plan.digest[7:19]}" in node1
        # node2: the old setting, and it still runs jobs.
        assert sh(bed, "node2", NCCL_CONF) == conf["node2"]
        ran = sh(bed, "node1", "srun --nodes=1 --nodelist=node2 --time=1 hostname").strip()
        assert ran == "node2"
        # The job was requeued off node1, not lost: it waits for both nodes.
        assert sh(bed, "node1", f"squeue --noheader --jobs={job} --format=%T").strip() in (
            "PENDING",
            "CONFIGURING",
        )

        # 2. Fixed, the same command resumes: node1, then node2.
        with phases("rolling: run again: node1 then node2 applied, re-validated, returned"):
            done = cli("configure", *roll)
        assert done.returncode == 0, shown(done)
        assert "done: every batch applied, validated and back in service" in done.stdout
        until(bed, f"! squeue --noheader --jobs={job} | grep -q .", "the job's end", timeout=180)
    finally:
        sh(bed, "node1", f"rm -f /root/sampling; mount -o remount,rw {MOUNT}", check=False)
        sh(bed, "node1", "scontrol update nodename=node1,node2 state=resume", check=False)

    for n in ("node1", "node2"):
        assert "NCCL_DEBUG=INFO" in sh(bed, n, NCCL_CONF), n
    rec = json.loads((state / f"{plan.stack}.json").read_text())
    assert rec["status"] == "done" and all(b["status"] == "done" for b in rec["batches"]), rec
    applied = json.loads((state / f"{plan.stack}.applied.json").read_text())
    assert applied["variables"]["nccl_rdma_nccl_settings"] == {"NCCL_DEBUG": "INFO"}
    # What the rollout measured, for the next one's estimate (rackform/rollout/measured.py).
    measured = applied["measured"]
    assert measured["batches"] == 2 and measured["roles"] == ["nccl_rdma"], measured
    steps = {k: measured[f"{k}_s"] for k in ("drain", "apply", "validate")}
    assert all(s > 0 for s in steps.values()), measured
    phases.notes.append(
        "rolling: a batch's steps, the median of the two (s): "
        + ", ".join(f"{k} {s:.0f}" for k, s in steps.items())
    )
    for path in sorted((tmp_path / "reports").glob("*/*/*.json"), key=lambda p: p.stat().st_mtime):
        took = json.loads(path.read_text()).get("launch_s") or {}
        phases.notes.append(
            f"rolling: re-validation on {path.stem}, the node's own seconds: {took}"
        )

    # No job lost: it counted to its end on both nodes, Slurm ran it again at least once, and
    # each run after the first went on from a checkpoint, never from 0.
    restarts = nothing_lost(sh(bed, "node1", f"cat /root/rolling-{job}.out"))
    assert job_record(bed, job)["JobState"] == "COMPLETED"

    # The budget held at every sampled moment: at most one of the two nodes out of service.
    rows = _out_of_service(sh(bed, "node1", "cat /root/samples"))
    assert len(rows) > 30, rows
    assert max(len(out) for _, out in rows) == 1, [r for r in rows if len(r[1]) > 1]
    assert {n for _, out in rows for n in out} == {"node1", "node2"}, rows
    phases.notes.append(
        f"rolling: {len(rows)} samples of Slurm's node states, at most one node out;"
        f" the job ran {len(restarts)} times"
    )
