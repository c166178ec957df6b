"""numpy, which torch's object collectives and torch.distributed.checkpoint convert through, is
checked before anything starts: a missing one is a single line naming `pip install numpy`,
never "Numpy is not available" deep in a rank. numpy is not uninstalled for these tests: a
sitecustomize.py on PYTHONPATH hides it from every process they start (smoke_helpers)."""

from __future__ import annotations

import json
import subprocess
import sys

from smoke_helpers import ROOT, env_without_numpy, torchrun

from validators import deps, launch

ONE_LINE = "numpy is not installed for {py} (torch.distributed's object collectives and " \
    "torch.distributed.checkpoint convert through it): pip install numpy"  # fmt: skip


def _run(*cmd: str, environ: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *cmd], capture_output=True, text=True, env=environ, cwd=ROOT,
        timeout=timeout, check=False,
    )  # fmt: skip


def test_here_numpy_is_usable():
    assert deps.numpy_missing() is None
    assert deps.numpy_problem() is None


def test_checks_see_a_hidden_numpy(tmp_path):
    code = "from validators import deps; print(deps.numpy_missing()); print(deps.numpy_problem())"
    r = _run("-c", code, environ=env_without_numpy(tmp_path))
    assert r.returncode == 0, r.stderr
    want = ONE_LINE.format(py=sys.executable)
    assert r.stdout.splitlines() == [want, want]
    assert r.stderr == ""  # torch's own "Failed to initialize NumPy" warning is not repeated


def test_the_job_refuses_to_start_in_one_line(tmp_path):
    r = _run("-m", "validators.smoke", "--steps", "2", environ=env_without_numpy(tmp_path))
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["smoke: " + ONE_LINE.format(py=sys.executable)]


def test_under_torchrun_only_one_line_per_node_and_no_rank_dies_in_a_collective(tmp_path):
    r = torchrun("--steps", "2", environ=env_without_numpy(tmp_path))
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert out.count("pip install numpy") == 1  # local rank 0 says it; the others just leave
    assert "Numpy is not available" not in out
    # The launcher quotes that line when torchrun fails.
    lines = out.splitlines()
    assert launch._setup_lines(lines) == ["smoke: " + ONE_LINE.format(py=sys.executable)]


def test_the_launcher_does_not_start_torchrun(tmp_path):
    out = tmp_path / "r.json"
    r = _run("-m", "validators.launch", "--nproc", "2", "--no-host-checks", "--json", str(out),
             "--", "--steps", "2", environ=env_without_numpy(tmp_path))  # fmt: skip
    assert r.returncode == 1
    assert "torch.distributed.run" not in r.stderr and "OMP_NUM_THREADS" not in r.stderr
    assert r.stderr.splitlines() == ["smoke: " + ONE_LINE.format(py=sys.executable)]
    job = next(c for c in json.loads(out.read_text())["checks"] if c["name"] == "job_completed")
    assert job["status"] == "fail"
    assert job["detail"] == "not started: " + ONE_LINE.format(py=sys.executable)
