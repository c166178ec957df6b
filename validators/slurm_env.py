"""What Slurm tells a job about itself, from the environment slurmd gives each task (sbatch(1),
srun(1) "OUTPUT ENVIRONMENT VARIABLES"): the job and what it was allocated, for the reports; and
a task's rank among the job step's tasks with the rendezvous address, for a job srun starts
without torchrun. Standard library only (the launcher imports it without torch)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Mapping

# torchrun's own variables win: under torchrun the ranks are its workers, not srun's tasks.
TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def _int(env: Mapping[str, str], name: str, default: int = 0) -> int:
    """A count Slurm writes, e.g. SLURM_GPUS_ON_NODE=8 (the leading number of `2(x3)`)."""
    m = re.match(r"\d+", env.get(name, ""))
    return int(m.group()) if m else default


def facts(env: Mapping[str, str] | None = None) -> dict | None:
    """The job this process runs in and what Slurm allocated it, or None outside Slurm."""
    env = os.environ if env is None else env
    if "SLURM_JOB_ID" not in env:
        return None
    return {
        "job_id": env["SLURM_JOB_ID"],
        "job_name": env.get("SLURM_JOB_NAME", ""),
        "partition": env.get("SLURM_JOB_PARTITION", ""),
        "nodelist": env.get("SLURM_JOB_NODELIST", ""),
        "nodes": _int(env, "SLURM_JOB_NUM_NODES"),
        "node": env.get("SLURMD_NODENAME", ""),
        # Set for a task when the job was allocated GPUs as GRES (gres/gpu); none otherwise.
        "gpus_per_node": _int(env, "SLURM_GPUS_ON_NODE"),
        # How many times the job was requeued (preempted, or requeued by the spot agent).
        "restart_count": _int(env, "SLURM_RESTART_COUNT"),
    }


def ranks(env: Mapping[str, str] | None = None) -> tuple[int, int, int, int]:
    """(rank, world size, local rank, local world size): torchrun's, else the srun step's
    (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, tasks per node), else one process."""
    env = os.environ if env is None else env
    if all(k in env for k in TORCHRUN):
        return tuple(int(env[k]) for k in TORCHRUN)  # type: ignore[return-value]
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        world = int(env["SLURM_NTASKS"])
        nodes = _int(env, "SLURM_STEP_NUM_NODES", _int(env, "SLURM_NNODES", 1)) or 1
        return int(env["SLURM_PROCID"]), world, _int(env, "SLURM_LOCALID"), max(1, world // nodes)
    return 0, 1, 0, 1


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout


def rendezvous(
    env: Mapping[str, str] | None = None, run: Callable[[list[str]], str] = _run
) -> tuple[str, str]:
    """MASTER_ADDR and MASTER_PORT for torch.distributed's env:// rendezvous: as set, else,
    in a Slurm step, the address Slurm reaches the step's first node at (its NodeAddr, on the
    cluster's fabric) and a port derived from the job id (one job per node set at a time)."""
    env = os.environ if env is None else env
    addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if not addr:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
        if not nodelist:
            return "127.0.0.1", port or "29500"
        first = run(["scontrol", "show", "hostnames", nodelist]).split()[0]
        m = re.search(r"\bNodeAddr=(\S+)", run(["scontrol", "show", "node", "--oneliner", first]))
        addr = m.group(1) if m else first
    if not port:
        port = str(20000 + _int(env, "SLURM_JOB_ID") % 20000)
    return addr, port


def record(env: Mapping[str, str] | None = None, run: Callable[[list[str]], str] = _run) -> dict:
    """This job's record as slurmctld has it now (`scontrol --oneliner show job`: JobState,
    PreemptTime, ...); empty outside Slurm or when scontrol cannot say."""
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID")
    if not job:
        return {}
    try:
        out = run(["scontrol", "--oneliner", "show", "job", job])
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(w.split("=", 1) for w in out.split() if "=" in w)


def preempted_in_grace(rec: Mapping[str, str]) -> bool:
    """Whether Slurm is preempting the job and has given it GraceTime: still RUNNING, with a
    PreemptTime. Slurm requeues such a job when the grace time ends, and only if it is still
    running then: a job whose tasks all end first ends FAILED and is never requeued (Slurm
    22.05 on the testbed), so a job that saved its checkpoint must wait to be stopped."""
    return rec.get("JobState") == "RUNNING" and rec.get("PreemptTime", "None") not in ("None", "")
