"""The resumable job, elastic, on CPU: two torchrun elastic agents on this machine are two nodes
(each in a process group of its own, with its own checkpoint directory as a node has its own
array), meeting in torchrun's c10d rendezvous on a free loopback port. One node is lost mid-run
(SIGKILL to its agent and its worker); the other continues from its newest
checkpoint with one rank; an agent started in the lost node's place, on its old directory, joins
at a checkpoint and the job finishes with two ranks. The report's failure costs are checked
against what happened. One run serves every assertion (each torch import costs seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loopback import free_port
from proc_tree import kill_tree
from smoke_helpers import ROOT, env

pytestmark = pytest.mark.slow

EVERY = 5
ARGS = ("--steps", "150", "--checkpoint-every", str(EVERY), "--batch", "2", "--seq-len", "16",
        "--min-step-s", "0.1", "--min-nodes", "1", "--collective-timeout-s", "30")  # fmt: skip


def agent(port: int, ck: Path, log: Path) -> subprocess.Popen:
    """One node: torchrun's elastic agent (1 to 2 nodes, short keep-alives so a lost agent
    leaves the rendezvous within seconds) and its one worker, in a session of its own."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1:2", "--nproc-per-node=1",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=elastic-test",
        "--rdzv-conf=last_call_timeout=1,keep_alive_interval=2,keep_alive_max_attempt=3",
        "--max-restarts=2", "-m", "validators.resumable", *ARGS, "--checkpoint-dir", str(ck),
    ]  # fmt: skip
    # validators/elastic.py sets it too: with torch's shared TCP store a node that joins a
    # later round waits for a MASTER_ADDR the first node never writes again (torch 2.13).
    e = {**env(), "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID"):
        e.pop(k, None)
    out = log.open("w")
    return subprocess.Popen(
        cmd, env=e, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )


def until(what, procs, timeout: float = 90, why: str = "") -> None:
    end = time.monotonic() + timeout
    while not what():
        alive = all(p.poll() is None for p in procs)
        assert alive and time.monotonic() < end, why
        time.sleep(0.05)


def lose(node: subprocess.Popen) -> None:
    """The node is gone at once: its agent and its worker."""
    kill_tree(node.pid)
    node.wait()


def steps(ck: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in ck.glob("step-*"))


@pytest.fixture(scope="module")
def elastic_run(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("elastic")
    port, n1, n2 = free_port(), tmp / "n1", tmp / "n2"
    t0 = time.monotonic()
    a = agent(port, n1, tmp / "a.log")
    time.sleep(0.5)  # a hosts the rendezvous' store (the first on the endpoint does)
    b = agent(port, n2, tmp / "b.log")
    procs = [a, b]
    logs = lambda: "\n".join(f.read_text() for f in sorted(tmp.glob("*.log")))  # noqa: E731
    try:
        until(lambda: steps(n2), procs, why="no checkpoint")
        time.sleep(0.25)  # a step or two past it
        lose(b)
        at_loss = steps(n1)[-1]
        until(lambda: "rank 0/1: from step" in (tmp / "a.log").read_text(), [a],
              why="the survivor did not resume alone")  # fmt: skip
        c = agent(port, n2, tmp / "c.log")  # the node back, with its old array
        procs = [a, c]
        for p in procs:
            p.wait(timeout=120)
        codes = [a.returncode, c.returncode]
    except BaseException:
        for p in procs:
            if p.poll() is None:
                lose(p)
        print(logs())
        raise
    wall = time.monotonic() - t0
    print(f"elastic run: {wall:.1f} s wall")
    return {
        "codes": codes, "at_loss": at_loss, "logs": logs(),
        "reports": [json.loads((d / "report.json").read_text()) for d in (n1, n2)],
    }  # fmt: skip


def test_a_lost_node_costs_the_steps_since_the_checkpoint_and_the_job_goes_on(elastic_run):
    assert elastic_run["codes"] == [0, 0], elastic_run["logs"]
    doc = elastic_run["reports"][0]
    assert doc["ok"] and doc["complete"] and doc["step"] == 150, doc["checks"]
    [lost] = doc["failures"]
    # It resumed from the newest checkpoint the survivor held when the node was lost, and the
    # work redone is exactly the steps finished after it.
    assert lost["resumed_from_step"] == elastic_run["at_loss"]
    assert lost["redone_steps"] == lost["lost_at_step"] - elastic_run["at_loss"]
    assert 0 <= lost["redone_steps"] < EVERY
    assert (lost["world_before"], lost["world_after"]) == (2, 1)
    assert lost["redone_s"] >= 0.1 * lost["redone_steps"] * 0.9  # paced at 0.1 s a step
    assert 0 <= lost["detect_s"] <= lost["continue_s"]
    # The runs: two ranks, one after the loss, two again after the node joined at a checkpoint.
    runs = doc["runs"]
    assert [r["world"] for r in runs] == [2, 1, 2], runs
    assert runs[0]["ended"].startswith("killed") and runs[1]["ended"] == "SIGTERM"
    [back] = doc["rejoins"]
    assert back["at_step"] == runs[1]["to_step"] == runs[2]["from_step"]
    # Taken back at a checkpoint: the one the agent's stop (SIGTERM) asked for.
    assert [c["why"] for c in doc["checkpoints"] if c["step"] == back["at_step"]] == ["SIGTERM"]
    # Time at reduced size: the one-rank run, from its start to the stop that took the node back.
    assert lost["reduced_s"] == pytest.approx(runs[1]["stopped"] - runs[1]["started"], abs=0.01)
    checks = {c["name"]: c for c in doc["checks"]}  # one failure: one lost_node check
    assert checks["lost_node"]["status"] == "pass"
    assert checks["lost_node"]["measured"] == lost["redone_steps"]
    assert checks["elastic_min_nodes"]["measured"] == 1
    assert checks["elastic_min_nodes"]["status"] == "pass"


def test_the_node_that_joins_gets_the_newest_checkpoint_from_its_peer(elastic_run):
    doc = elastic_run["reports"][1]
    assert doc["ok"] and doc["step"] == 150
    copied = doc["resume"]["copied_from_peer"]
    assert copied["step"] == doc["rejoins"][0]["at_step"] and copied["bytes"] > 0
    # Both nodes end with the same replicas and the same record of the failure.
    assert doc["failures"] == elastic_run["reports"][0]["failures"]


def test_what_torchruns_elastic_agent_costs_here():
    """The agent's own cost, which the Slurm launcher avoids for the smoke job: a whole
    torchrun process (its torch import, a one-node c10d rendezvous, a worker that does
    nothing), printed for the docs; only that it ran is asserted."""
    t0, c0 = time.monotonic(), os.times()
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=1:1", "--nproc-per-node=1",
         "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--rdzv-id=cost",
         "--no-python", "true"],
        env=env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    c1 = os.times()
    cpu = (c1.children_user + c1.children_system) - (c0.children_user + c0.children_system)
    assert done.returncode == 0, done.stderr
    print(f"torchrun's elastic agent: {time.monotonic() - t0:.2f} s wall, {cpu:.2f} s CPU")
