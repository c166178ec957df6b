"""Jobs released from drained nodes on the local Slurm (tests/slurm_local.py, two nodes): an
elastic job (comment `rackform-elastic:min=N`, one srun step a node, as validators/elastic.py
runs) is shrunk off the node and goes on on the other, its step there untouched; a job that is
not elastic (its name `elastic` included), one below its minimum, one whose batch host is taken,
one on both nodes taken, and an array's elements each by its own id, are requeued or shrunk by
the same rules; a pending job is never touched. The steps are `sleep`s: what torch does when its
agent's step is killed is tests/validators/test_elastic_slurm.py's. Also: Slurm shows no
`--no-kill` on a running job (why the mark exists), and the launcher's mark set on a real job."""

from __future__ import annotations

import subprocess

import pytest
from slurm_local import NODES

from rackform.lifecycle.elastic import SHRINK, Decision, min_nodes
from rackform.lifecycle.maintenance import release
from rackform.lifecycle.record import Store
from rackform.lifecycle.slurm import SlurmSteps
from validators.elastic import mark

PER_NODE = """#!/bin/bash
for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
  srun --nodes=1 --ntasks=1 --nodelist="$n" sleep 300 &
done
wait
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "per-node.sh"
    path.write_text(PER_NODE)
    return str(path)


def submit(slurm, script, *args, nodes=2) -> str:
    job = slurm.sbatch(f"--nodes={nodes}", "--ntasks-per-node=1", "--no-kill", "--requeue",
                       *args, script)  # fmt: skip
    slurm.wait_state(job, "RUNNING")
    # Both steps started (one a node), as the launcher's job has them.
    assert slurm.wait(lambda: len(steps(slurm, job)) == nodes, 15), steps(slurm, job)
    return job


def steps(slurm, job: str) -> dict[str, str]:
    """The job's srun steps (not its batch step): step id -> node."""
    out = slurm.run("squeue", "--steps", "--noheader", "-j", job, "-o", "%i|%N").stdout.split()
    return dict(line.split("|") for line in out if not line.split("|")[0].endswith(".batch"))


def fields(slurm, job: str) -> dict[str, str]:
    out = slurm.run("scontrol", "--oneliner", "show", "job", job).stdout
    return dict(w.split("=", 1) for w in out.split() if "=" in w)


def take(slurm, tmp_path, batch) -> tuple[list, list[dict]]:
    """`batch` drained and its jobs released as heal and the rollouts do; what became of each,
    and the audit log's `jobs` entries."""
    steps_ = SlurmSteps(slurm.runner, NODES, poll_s=0.2)
    assert all(o.ok for o in steps_.drain(batch, "rackform heal: test"))
    store = Store(tmp_path / "state", "slurm-a-default", kind="heal")
    done = release(steps_, batch, store, "heal")
    return done, [e for e in store.log.entries() if e["event"] == "jobs"]


def test_an_elastic_job_goes_on_without_the_node_and_a_lookalike_is_requeued(
    slurm, tmp_path, script
):
    elastic = submit(slurm, script, "--job-name=train", "--comment=rackform-elastic:min=1")
    lookalike = submit(slurm, script, "--job-name=elastic", "--comment=rackform-elastic")
    before = steps(slurm, elastic)
    done, audit = take(slurm, tmp_path, [NODES[1]])
    got = {r.job: (r.how, r.nodes) for r in done}
    assert got == {elastic: ("reduced", (NODES[0],)), lookalike: ("requeued", ())}
    f = fields(slurm, elastic)
    assert (f["JobState"], f["NodeList"], f["NumNodes"]) == ("RUNNING", NODES[0], "1")
    # Its step on the node left runs on, the same step; the one on the node taken is gone.
    kept = {s: n for s, n in before.items() if n == NODES[0]}
    assert slurm.wait(lambda: steps(slurm, elastic) == kept, 10), steps(slurm, elastic)
    assert slurm.wait(lambda: slurm.node_states()[NODES[1]] == "drained", 15)
    assert slurm.state(lookalike) in ("PENDING", "REQUEUED", "COMPLETING")
    (entry,) = audit
    assert entry["kind"] == "heal" and entry["nodes"] == [NODES[1]]
    assert {j["job"]: j["how"] for j in entry["jobs"]} == {
        elastic: "reduced",
        lookalike: "requeued",
    }
    # Slurm shows no `--no-kill` on the running job: the mark is what heal can read.
    assert not [k for k in fields(slurm, elastic) if "kill" in k.lower()]


def test_below_its_minimum_or_its_batch_host_taken_an_elastic_job_is_requeued(
    slurm, tmp_path, script
):
    floor = submit(slurm, script, "--comment=rackform-elastic:min=2")
    done, _ = take(slurm, tmp_path, [NODES[1]])
    assert [(r.job, r.how, r.why) for r in done] == [
        (floor, "requeued", "1 of 2 nodes left, below its minimum 2")
    ]
    slurm.clean()
    first = submit(slurm, script, "--comment=rackform-elastic:min=1")
    assert fields(slurm, first)["BatchHost"] == NODES[0]
    done, _ = take(slurm, tmp_path, [NODES[0]])
    assert [(r.job, r.how) for r in done] == [(first, "requeued")]
    assert "first node" in done[0].why


def test_a_job_on_both_nodes_taken_is_requeued_and_a_pending_one_is_left(slurm, tmp_path, script):
    both = submit(slurm, script, "--comment=rackform-elastic:min=1")
    # Pending: it wants more CPUs than the nodes have free; it holds no node.
    pending = slurm.sbatch("--nodes=2", "--ntasks-per-node=2", "--no-kill",
                           "--comment=rackform-elastic:min=1", script)  # fmt: skip
    assert slurm.wait(lambda: slurm.state(pending) == "PENDING", 10)
    done, _ = take(slurm, tmp_path, list(NODES))
    assert [(r.job, r.how) for r in done] == [(both, "requeued")]
    assert slurm.state(pending) == "PENDING"


def test_a_job_arrays_elements_are_released_each_by_its_own_id(slurm, tmp_path, script):
    array = slurm.sbatch("--array=1-3", "--nodes=2", "--ntasks-per-node=1", "--no-kill",
                         "--comment=rackform-elastic:min=1", script)  # fmt: skip
    running = [f"{array}_1", f"{array}_2"]  # two CPUs a node: the third waits
    assert slurm.wait(lambda: all(slurm.state(j) == "RUNNING" for j in running), 20)
    done, _ = take(slurm, tmp_path, [NODES[1]])
    assert sorted((r.job, r.how, r.nodes) for r in done) == [
        (j, "reduced", (NODES[0],)) for j in running
    ]
    for j in running:
        assert fields(slurm, j)["NodeList"] == NODES[0]
    assert slurm.state(f"{array}_3") == "PENDING"


def test_the_launcher_marks_its_own_job_and_leaves_a_users_comment(slurm, script):
    def run(argv):
        return subprocess.run(argv, capture_output=True, text=True, check=True,
                              env=slurm.env, timeout=30).stdout  # fmt: skip

    def env(job, node=NODES[0], step_nodes="1"):
        return {"SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": fields(slurm, job)["NodeList"],
                "SLURM_JOB_NUM_NODES": "2", "SLURMD_NODENAME": node,
                "SLURM_STEP_NUM_NODES": step_nodes}  # fmt: skip

    free = submit(slurm, script)
    assert mark(env(free, node=NODES[1]), 1, run) is None  # not the first node: its peer marks
    assert "spans several nodes" in mark(env(free, step_nodes="2"), 1, run)
    assert mark(env(free), None, run) is None  # every node its minimum: not elastic
    assert "marked elastic" in mark(env(free), 1, run)
    assert min_nodes(fields(slurm, free)["Comment"]) == 1
    users = submit(slurm, script, "--comment=team-a")
    assert "the user's" in mark(env(users), 1, run)
    assert fields(slurm, users)["Comment"] == "team-a"


def test_slurm_refuses_to_shrink_a_job_off_its_batch_host_and_the_refusal_is_said(slurm, script):
    # Why decide() requeues such a job: asked anyway, Slurm refuses and the job keeps its nodes.
    job = submit(slurm, script, "--comment=rackform-elastic:min=1")
    steps_ = SlurmSteps(slurm.runner, NODES, poll_s=0.2)
    (r,) = steps_._shrink([Decision(job, SHRINK, "asked", (NODES[1],))])
    assert (r.how, r.ok) == ("failed", False) and r.why.startswith("not shrunk: "), r
    assert fields(slurm, job)["NodeList"] == f"{NODES[0][:-1]}[0-1]"
