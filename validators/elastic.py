"""The resumable job, elastic under Slurm: one job step per node starts torchrun's elastic agent
(a step of its own, so that a lost node ends only its own step: a step over both nodes ended
with the failed one, `srun --no-kill` or not, on the Slurm tests/validators/test_elastic_slurm.py
runs),

    #SBATCH --nodes=4 --no-kill --requeue
    for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
        srun --nodes=1 --ntasks=1 --nodelist="$n" python -m validators.elastic --min-nodes 2 -- ARGS &
    done
    wait

and the agents meet in torchrun's c10d rendezvous on the job's first node (the address Slurm
reaches it at, a port derived from the job id; one rendezvous per run of the job: the id names
the requeue count). `--nnodes MIN:MAX` lets the job go on with as few as `--min-nodes` (default
$RACKFORM_MIN_NODES, else all) of the nodes Slurm gave it: when a node is lost the ranks left
fail their next collective, the agents restart their workers with the nodes left (at most
`--max-restarts` times) and the job resumes from its newest checkpoint. Slurm keeps the job
(`--no-kill`: a failed node leaves the allocation and the job runs on). The first node hosts the
rendezvous: losing it ends the job (Slurm requeues it, with `--requeue`).

Slurm keeps a `--no-kill` job whose node fails, but shows that nowhere a running job is read, so
heal could not tell this job from one a lost node ends: on the job's first node the launcher marks
the job, its comment set to `rackform-elastic:min=N` (N the fewest nodes it goes on with), and
heal then shrinks the job off a node it drains rather than requeueing it
(rackform/lifecycle/elastic.py). It marks only where its own step is one node (a step over several
nodes dies whole with any of them), the job has fewer than all its nodes as its minimum, and the
comment is free (a comment of the user's is left, and heal requeues the job as before).

Slurm cannot add a node to a running job, so a lost node is taken back by requeueing: at each
checkpoint where the job runs short, its first rank asks Slurm whether the nodes to run at full
size are there (the nodes it lost idle again, or as many idle nodes in its partition) and how
long the job has left (`squeue %L`), and requeues the job (`scontrol requeue`) only where that
pays: the time left times the share of nodes lost exceeds the restart (validators/takeback.py,
the rule the goodput simulation runs too). The requeued job resumes from that checkpoint at
full size once Slurm starts it again (after `AuthInfo=cred_expire`, 120 s by default). Outside a Slurm job
nothing is requeued: torchrun's agent takes a returning node back itself, at a checkpoint (it
stops the workers with SIGTERM when a node waits to join; the job checkpoints and stops).

Standard library only: the torch import is torchrun's own (os.execv into it)."""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace

from validators import slurm_env, takeback
from validators.launch import ROOT

# The rendezvous' keep-alive: a lost agent is dropped from it after about 3 x 5 s (torchrun's
# defaults); a new round with fewer than all nodes closes after last_call_timeout.
RDZV_CONF = "last_call_timeout=5,keep_alive_interval=5,keep_alive_max_attempt=3"


def torchrun_argv(
    env: Mapping[str, str], min_nodes: int | None, max_restarts: int, nproc: str,
    job_args: list[str], run: Callable[[list[str]], str] = slurm_env._run,
) -> list[str]:  # fmt: skip
    """torchrun's command line for this node's task of the Slurm job in `env`."""
    nodes = slurm_env._int(env, "SLURM_JOB_NUM_NODES", 1) or 1
    low = min(nodes, min_nodes or nodes)
    # On the job's first node, not the step's: each node's agent may be a step of its own.
    addr, port = slurm_env.rendezvous(
        {k: v for k, v in env.items() if k != "SLURM_STEP_NODELIST"}, run
    )
    run_id = f"{env.get('SLURM_JOB_ID', 'local')}-{slurm_env._int(env, 'SLURM_RESTART_COUNT')}"
    # The first node hosts the rendezvous' store, named rather than left to whichever agent
    # binds the port first (on one machine every agent's address matches the endpoint).
    first = run(["scontrol", "show", "hostnames", env["SLURM_JOB_NODELIST"]]).split()[0]
    host = int(env.get("SLURMD_NODENAME") == first)
    return [
        sys.executable, "-m", "torch.distributed.run",
        f"--nnodes={low}:{nodes}", f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={addr}:{port}", f"--rdzv-id={run_id}",
        f"--rdzv-conf={RDZV_CONF},is_host={host}", f"--max-restarts={max_restarts}",
        "-m", "validators.resumable", *job_args,
    ]  # fmt: skip


# rackform/lifecycle/elastic.py reads it (MARK there: the two must agree).
ELASTIC_MARK = "rackform-elastic:min="


def mark(
    env: Mapping[str, str], min_nodes: int | None, run: Callable[[list[str]], str] = slurm_env._run
) -> str | None:
    """On the job's first node, set the job's comment to the elastic mark; what was done (or
    why not), None where there is nothing to say (not the first node, not elastic)."""
    job, given = env.get("SLURM_JOB_ID"), env.get("SLURM_JOB_NODELIST")
    nodes = slurm_env._int(env, "SLURM_JOB_NUM_NODES", 1) or 1
    low = min(nodes, min_nodes or nodes)
    if not job or not given or low >= nodes:
        return None  # every node or nothing: not elastic
    try:
        if env.get("SLURMD_NODENAME") != run(["scontrol", "show", "hostnames", given]).split()[0]:
            return None
        if env.get("SLURM_STEP_NUM_NODES") != "1":
            return f"job {job} not marked elastic: its step spans several nodes (one step a node)"
        now = run(["squeue", "--noheader", "--jobs", job, "--format=%k"]).strip()
        if now not in ("", "(null)") and not now.startswith(ELASTIC_MARK):
            return f"job {job} not marked elastic: its comment is the user's ({now[:40]!r})"
        run(["scontrol", "update", f"JobId={job}", f"Comment={ELASTIC_MARK}{low}"])
    except (OSError, IndexError, subprocess.SubprocessError) as exc:
        return f"job {job} not marked elastic (heal requeues it): {exc}"
    return f"job {job} marked elastic: heal shrinks it off a drained node down to {low} nodes"


# Slurm holds a requeued job this long before it starts again: `AuthInfo=cred_expire`, 120 s
# by default (slurm.conf(5), Slurm 22.05).
REQUEUE_DELAY_S = 120.0
# A node name as Slurm prints it (hostlist expanded); anything else in its answer is malformed.
NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PARTITION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SILENT = "Slurm did not answer"


def time_left(out: str) -> float | None:
    """squeue's `%L` (squeue(1), Slurm 22.05: the time limit less the time used, as
    [days-]hours:minutes:seconds or minutes:seconds; "UNLIMITED" for no limit, "NOT_SET" if
    not yet established) in seconds: math.inf for no limit, None where not set. ValueError for
    anything else."""
    s = out.strip()
    if s == "UNLIMITED":
        return math.inf
    if s == "NOT_SET":
        return None
    m = re.fullmatch(r"(?:(\d{1,5})-)?(?:(\d{1,2}):)?(\d{1,2}):(\d{2})", s)
    if not m or (m.group(1) and not m.group(2)):
        raise ValueError(f"squeue's time left {s[:40]!r}")
    d, h, mi, se = (int(g or 0) for g in m.groups())
    return float(((d * 24 + h) * 60 + mi) * 60 + se)


def _states(out: str) -> dict[str, str]:
    """`sinfo --Node --format=%N|%T` lines: node -> state; ValueError for a line that is not."""
    states = {}
    for line in out.split():
        name, _sep, state = line.partition("|")
        if not NODE.fullmatch(name) or not re.fullmatch(r"[a-z_]+[*~#!%$@^+-]*", state):
            raise ValueError(f"sinfo's line {line[:60]!r}")
        states[name] = state
    return states


def requeue_when_back(
    running: set[str], env: Mapping[str, str] | None = None,
    run: Callable[[list[str]], str] = slurm_env._run, restart_s: float = takeback.DEFAULT_RESTART_S,
    requeue_delay_s: float = REQUEUE_DELAY_S,
) -> takeback.Decision | None:  # fmt: skip
    """Under Slurm, where the job runs on fewer nodes (`running`, by name) than it was given:
    whether to take them back (validators/takeback.py, the restart costing `restart_s` plus
    `requeue_delay_s`), and where it pays, requeue the job. None where there is nothing to
    decide (not a Slurm job, or on every node)."""
    env = os.environ if env is None else env
    job, given = env.get("SLURM_JOB_ID", ""), env.get("SLURM_JOB_NODELIST")
    nodes = slurm_env._int(env, "SLURM_JOB_NUM_NODES")
    if not job or not given or not running or len(running) >= nodes:
        return None  # on every node it was given: nothing to ask Slurm
    if not re.fullmatch(r"\d{1,12}", job):
        return takeback.Decision(False, takeback.BAD, f"job id {job[:20]!r} is not a number")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9,.\[\]_-]*", given):
        return takeback.Decision(False, takeback.BAD, f"node list {given[:40]!r} is not one")
    part = env.get("SLURM_JOB_PARTITION", "")
    try:
        lost = sorted(set(run(["scontrol", "show", "hostnames", given]).split()) - running)
        if not lost:
            return None
        if not all(NODE.fullmatch(n) for n in lost):
            raise ValueError(f"scontrol's host names {lost[:3]}")
        # Idle: answering (no `*`), in service, and free; a node Slurm has not yet seen go is
        # still allocated to this job, and one another job took is not free. In its
        # partition, any idle node stands in for a lost one (Slurm gives the requeued job it).
        where = (
            [f"--partition={part}"] if PARTITION.fullmatch(part) else [f"--nodes={','.join(lost)}"]
        )
        states = _states(run(["sinfo", "--noheader", "--Node", "--format=%N|%T", *where]))
        idle = {n for n, s in states.items() if s == "idle"}
        remaining = None
        if len(idle) >= len(lost):  # the nodes are there: is the time left worth a restart?
            remaining = time_left(run(["squeue", "--noheader", f"--jobs={job}", "--format=%L"]))
        d = takeback.decide(nodes, nodes - len(lost), len(idle), remaining, restart_s,
                            requeue_delay_s)  # fmt: skip
        if not d.take:
            return d
        run(["scontrol", "requeue", job])
    except ValueError as exc:
        return takeback.Decision(False, takeback.BAD, f"Slurm's answer is malformed: {exc}")
    except (OSError, subprocess.SubprocessError) as exc:
        return takeback.Decision(False, SILENT, f"{SILENT} ({type(exc).__name__}): ask again")
    back = [n for n in lost if n in idle]
    said = (f"nodes {','.join(back)} are back" if len(back) == len(lost)
            else f"{len(idle)} nodes idle in partition {part}")  # fmt: skip
    return replace(d, why=f"{said}: job {job} requeued to resume at full size ({d.why})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="validators.elastic", description=__doc__.split("\n", maxsplit=1)[0]
    )
    p.add_argument("--min-nodes", type=int, help="Default $RACKFORM_MIN_NODES, else all.")
    p.add_argument("--max-restarts", type=int, default=3, help="Failures the agents restart.")
    p.add_argument("--nproc-per-node", default="gpu", help="torchrun's (gpu, cpu, or a count).")
    p.add_argument("job_args", nargs=argparse.REMAINDER, help="-- then the job's arguments.")
    a = p.parse_args(argv)
    if not os.environ.get("SLURM_JOB_NODELIST"):
        p.error("not in a Slurm job (no $SLURM_JOB_NODELIST): run it under srun, one task a node")
    raw = os.environ.get("RACKFORM_MIN_NODES", "")
    if a.min_nodes is None and raw:
        if not re.fullmatch(r"[1-9]\d*", raw):
            p.error(f"$RACKFORM_MIN_NODES={raw!r}: the fewest nodes, a whole number from 1")
        a.min_nodes = int(raw)
    if a.min_nodes is not None and a.min_nodes < 1:
        p.error("--min-nodes must be at least 1")
    if a.max_restarts < 0:
        p.error("--max-restarts must not be negative")
    job = a.job_args[1:] if a.job_args[:1] == ["--"] else a.job_args
    if a.min_nodes is not None and "--min-nodes" not in job:
        job = [*job, "--min-nodes", str(a.min_nodes)]
    argv_ = torchrun_argv(os.environ, a.min_nodes, a.max_restarts, a.nproc_per_node, job)
    said = mark(os.environ, a.min_nodes)
    if said:
        print(f"elastic: {said}", flush=True)
    print("elastic: " + " ".join(argv_[1:]), flush=True)
    env = dict(os.environ)  # the workers import validators from where this file is
    env["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    # torch's shared rendezvous store caches the first round's MASTER_ADDR: a node joining a
    # later round waits for one the first node never writes again (torch 2.13, seen in
    # tests/validators/test_elastic.py); its own opt-out gives each round its own.
    env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    os.execve(argv_[0], argv_, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
