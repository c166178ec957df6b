"""validators.elastic's own checks before it execs torchrun (standard library only, so no torch
is imported): outside a Slurm job, and a bad $RACKFORM_MIN_NODES, each a one-line error."""

from __future__ import annotations

import subprocess
import sys

import pytest
from smoke_helpers import ROOT, env


def elastic(*args: str, **more: str) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in env().items() if not k.startswith("SLURM_")}
    return subprocess.run(
        [sys.executable, "-m", "validators.elastic", *args],
        env={**e, **more}, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_outside_a_slurm_job_it_says_so():
    done = elastic("--", "--steps", "10")
    assert done.returncode == 2 and "not in a Slurm job" in done.stderr


@pytest.mark.parametrize(("raw", "arg"), [("0", None), ("two", None), (None, "0")])
def test_a_minimum_below_one_node_is_refused(raw, arg):
    more = {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2"}
    if raw is not None:
        more["RACKFORM_MIN_NODES"] = raw
    done = elastic(*(["--min-nodes", arg] if arg else []), "--", "--steps", "10", **more)
    assert done.returncode == 2, done.stderr
    needle = f"$RACKFORM_MIN_NODES={raw!r}" if raw is not None else "--min-nodes must be at least 1"
    assert needle in done.stderr
