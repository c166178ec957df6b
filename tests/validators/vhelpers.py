"""Helpers for the validators' tests: how to run the job and the host checks as a node would
(this checkout's validators/ on PYTHONPATH)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [e.get("PYTHONPATH")])])
    return e


def torchrun(
    *job_args: str, nproc: int = 2, timeout: float = 120, prefix=()
) -> subprocess.CompletedProcess:
    """The smoke job under torchrun on loopback, as the launcher runs it (no restarts)."""
    cmd = [
        *prefix,
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "--max-restarts=0",
        "-m",
        "validators.smoke",
        *job_args,
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env(), cwd=ROOT, check=False
    )
