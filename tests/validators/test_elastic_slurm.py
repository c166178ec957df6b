"""The elastic resumable job under a real Slurm (tests/slurm_local.py: Debian's slurmctld and two
slurmd on loopback, a Slurm of this module's own with `SlurmdTimeout=6` so a silent node is
DOWN within seconds rather than Slurm's 300). An `sbatch --no-kill --requeue` two-node job runs
`python -m validators.elastic` as one srun step per node (torchrun's elastic agent on each
node, c10d rendezvous on the first). The second node is lost whole (its slurmd, its job step and its
workers SIGKILLed): Slurm marks it DOWN and keeps the job RUNNING on the first, which resumes
from its checkpoint with one rank. The node's slurmd started again, Slurm returns it to service
(ReturnToService=2); at its next checkpoint the job sees it idle and requeues itself, and the
requeued job resumes at full size, the returned node given the checkpoint by its peer. One run
serves every assertion."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
from loopback import free_port
from proc_tree import kill_tree
from slurm_local import NODES, TOOLS, start
from smoke_helpers import ROOT

pytestmark = pytest.mark.slow

STEPS, EVERY = 150, 5


def script(ck: Path) -> str:
    job = (f"--steps {STEPS} --checkpoint-every {EVERY} --batch 2 --seq-len 16 --min-step-s 0.1"
           f" --collective-timeout-s 30 --checkpoint-dir {ck}/$SLURMD_NODENAME")  # fmt: skip
    return f"""#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --no-kill --requeue --open-mode=append
#SBATCH --job-name=elastic
cd {ROOT}
for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
  srun --nodes=1 --ntasks=1 --nodelist="$n" bash -c \\
    'exec {sys.executable} -m validators.elastic --min-nodes 1 --nproc-per-node 1 -- {job}' &
done
wait
"""


def on_node(node: str) -> set[int]:
    """The processes of `node`'s job steps: every process whose environment names it (what
    slurmd gives a task, inherited by torchrun and its workers), and the slurmstepd above each
    (daemonized: in no slurmd's tree or session)."""
    mark, out = f"SLURMD_NODENAME={node}".encode() + b"\0", set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if mark in (proc / "environ").read_bytes():
                out.add(int(proc.name))
                parent = Path("/proc", (proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if (parent / "cmdline").read_bytes().startswith(b"slurmstepd"):
                    out.add(int(parent.name))
        except (OSError, IndexError):
            continue
    return out


def lose_node(slurm, node: str) -> None:
    """The node gone at once: its slurmd, its steps' slurmstepd and tasks (the agent, its
    worker in a session of its own), all stopped together, then SIGKILLed."""
    slurmd = slurm.procs.pop(f"slurmd-{node}")
    kill_tree(slurmd.pid, *on_node(node))
    slurmd.wait()


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory) -> dict:
    missing = [t for t in TOOLS if __import__("shutil").which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: run scripts/setup.sh --test")
    tmp = tmp_path_factory.mktemp("elastic-slurm")
    slurm = start(tmp / "slurm", extra_conf="SlurmdTimeout=6\n")
    ck, out = tmp / "ck", tmp / "job.out"
    (tmp / "job.sh").write_text(script(ck))
    seen: dict = {}
    try:
        t0 = time.monotonic()
        job = slurm.sbatch(f"--output={out}", f"--export=ALL,MASTER_PORT={free_port()},"
                           "OMP_NUM_THREADS=1,GLOO_SOCKET_IFNAME=lo", str(tmp / "job.sh"))  # fmt: skip
        lost_node = NODES[1]
        wait = lambda f, t=90: slurm.wait(f, t, 0.1)  # noqa: E731
        assert wait(lambda: list((ck / lost_node).glob("step-*"))), slurm.log()
        time.sleep(0.25)
        lose_node(slurm, lost_node)
        assert wait(lambda: slurm.node_states().get(lost_node, "").startswith("down"), 30), (
            slurm.node_states()
        )
        seen["states_when_lost"] = slurm.node_states()
        seen["job_when_lost"] = slurm.run("scontrol", "--oneliner", "show", "job", job).stdout
        seen["squeue_when_lost"] = slurm.state(job)
        assert wait(lambda: "rank 0/1: from step" in out.read_text()), out.read_text()
        slurm._start(f"slurmd-{lost_node}", ["slurmd", "-D", "-N", lost_node])  # it is back
        assert wait(lambda: "requeued to resume at full size" in out.read_text()), out.read_text()
        assert wait(lambda: out.read_text().count("rank 0/2: from step") >= 2, 60), out.read_text()
        assert wait(lambda: slurm.state(job) in ("COMPLETED", ""), 90), slurm.state(job)
        seen["wall_s"] = time.monotonic() - t0
        seen["jobcomp"] = slurm.jobcomp.read_text() if slurm.jobcomp.exists() else ""
    finally:
        slurm.shutdown()
    print(f"elastic under Slurm: {seen.get('wall_s', 0):.1f} s wall")
    return {**seen, "job": job, "out": out.read_text(),
            "reports": {n: json.loads((ck / n / "report.json").read_text()) for n in NODES}}  # fmt: skip


def test_slurm_keeps_the_job_on_the_node_left_and_it_goes_on_from_its_checkpoint(slurm_run):
    # Slurm's view: the lost node DOWN, the job still RUNNING (--no-kill), no longer on it.
    assert slurm_run["states_when_lost"][NODES[1]].startswith("down")
    assert slurm_run["squeue_when_lost"] == "RUNNING"
    rec = dict(w.split("=", 1) for w in slurm_run["job_when_lost"].split() if "=" in w)
    assert rec["JobState"] == "RUNNING" and rec["NodeList"] == NODES[0], rec
    # The launcher marked its job for heal (rackform/lifecycle/elastic.py reads it).
    assert rec["Comment"] == "rackform-elastic:min=1", rec
    assert f"job {slurm_run['job']} marked elastic" in slurm_run["out"]
    doc = slurm_run["reports"][NODES[0]]
    assert doc["ok"] and doc["complete"] and doc["step"] == STEPS, doc["checks"]
    [lost] = doc["failures"]
    assert (lost["world_before"], lost["world_after"]) == (2, 1)
    assert 0 <= lost["redone_steps"] < EVERY


def test_the_node_back_the_job_requeues_itself_and_ends_at_full_size(slurm_run):
    doc = slurm_run["reports"][NODES[0]]
    runs = doc["runs"]
    assert [r["world"] for r in runs] == [2, 1, 2], runs
    assert [r["slurm_restart_count"] for r in runs] == [0, 0, 1]  # the last one requeued
    assert re.search(r"nodes slurm-a-1 are back: job \d+ requeued", slurm_run["out"])
    # Decided by the numbers (validators/takeback.py): the job has no time limit (squeue's
    # %L says UNLIMITED), so any restart pays once the node is there; recorded with them.
    took = [t for t in doc["take_backs"] if t["take"]]
    assert [(t["kind"], t["remaining_s"], t["nodes"], t["running"]) for t in took] == [
        ("pays", "unlimited", 2, 1)
    ], doc["take_backs"]
    back = slurm_run["reports"][NODES[1]]
    assert back["ok"] and back["step"] == STEPS
    assert back["resume"]["copied_from_peer"]["step"] == runs[2]["from_step"]
