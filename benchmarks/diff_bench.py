"""Whole-process `rackform diff` time on a git repository of 50 blueprints of which 5 changed,
against the time of one `rackform plan` of one of them: the ratio says what a pull request's
check costs in plans. Only the changed blueprints are compiled and planned (at both revisions,
every environment), so the ratio stays near 5 x 2 x environments x (a plan without the
interpreter start), whatever the repository's size; a diff that planned every blueprint would
be ten times that. A fresh `python -m rackform ...` per run, median of --repeat runs.

    .venv/bin/python benchmarks/diff_bench.py [--repeat 3] [--blueprints 50] [--changed 5]

This prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = (ROOT / "blueprints" / "aws-training.yaml").read_text()


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(args: list[str], cwd: Path, ok=(0,)) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child, stdout)."""
    cpu = _child_cpu()
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "rackform", *args], cwd=cwd, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    if done.returncode not in ok:
        raise SystemExit(f"rackform {' '.join(args)} failed:\n{done.stderr}")
    return wall, _child_cpu() - cpu, done.stdout


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def make_repo(tmp: Path, total: int, changed: int) -> Path:
    repo = tmp / "repo"
    (repo / "blueprints").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "bench")
    git(repo, "config", "user.email", "bench@example.com")
    for i in range(total):
        text = SOURCE.replace("name: llm-train-a", f"name: cluster-{i:02d}", 1)
        (repo / "blueprints" / f"cluster-{i:02d}.yaml").write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    for i in range(changed):
        path = repo / "blueprints" / f"cluster-{i:02d}.yaml"
        path.write_text(path.read_text().replace("count: 4", "count: 5", 1))
    git(repo, "commit", "-q", "-am", "five clusters grow")
    return repo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--blueprints", type=int, default=50)
    ap.add_argument("--changed", type=int, default=5)
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"rackform diff benchmark: {platform.python_implementation()} "
        f"{platform.python_version()}, {cores} cores available, median of {args.repeat}; "
        f"{args.blueprints} blueprints, {args.changed} changed, each with 4 environments"
    )
    with tempfile.TemporaryDirectory() as d:
        repo = make_repo(Path(d), args.blueprints, args.changed)
        plan_args = ["plan", "blueprints/cluster-00.yaml", "--json"]
        diff_args = ["diff", "--base", "HEAD~1", "--json"]
        timed(plan_args, repo)  # warm the bytecode caches; not counted
        plans, diffs, shown = [], [], 0
        for _ in range(args.repeat):
            wall, cpu, _ = timed(plan_args, repo)
            plans.append((wall, cpu))
            wall, cpu, out = timed(diff_args, repo)
            diffs.append((wall, cpu))
            shown = len(json.loads(out)["blueprints"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average at the end: {load:.2f} (wall time is only meaningful on an idle machine)")
    pw, pc = (statistics.median(x) for x in zip(*plans, strict=True))
    dw, dc = (statistics.median(x) for x in zip(*diffs, strict=True))
    print(f"{'':>22} {'wall s':>7} {'cpu s':>6}")
    print(f"{'one rackform plan':>22} {pw:>7.2f} {pc:>6.2f}")
    print(f"{'rackform diff':>22} {dw:>7.2f} {dc:>6.2f}")
    print(f"blueprints in the diff: {shown} of {args.blueprints} (only the changed are planned)")
    print(f"diff / plan: {dw / pw:.2f}x wall, {dc / pc:.2f}x CPU")
    envs = args.changed * 2 * 4
    print(
        f"per environment planned ({envs}: {args.changed} blueprints x 2 revisions x 4): "
        f"{dc / envs:.3f} s CPU against {pc:.3f} s for one whole plan process"
    )


if __name__ == "__main__":
    main()
