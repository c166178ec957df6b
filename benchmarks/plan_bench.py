"""Whole-process `rackform plan` time for clusters of 1, 8, 64 and 512 nodes (by default; any
sizes up to a node group's maximum of 4096): AWS training clusters of p5.48xlarge nodes, or with
`--target bare_metal` bare-metal clusters of as many 8 x H100 hosts. A fresh
`python -m rackform plan FILE --json` per run (interpreter start, imports, loading, the program
under Pulumi's mock runtime, output), median of --repeat runs.

    .venv/bin/python benchmarks/plan_bench.py [--repeat 3] [--sizes 1,8,64,512,4096]
        [--target aws|bare_metal] [--against REF]

Target: 512 AWS nodes in 5 s or less on a 2-core machine, growing close to linearly; 4,096
nodes in 8 s of CPU or less (issue 42). `--attribute` profiles the largest size once and
prints whose code the time is spent in: rackform's, or the Pulumi SDK's mock runtime (the floor
of any plan that runs the real program under the mocks). With
`--against REF` the same sizes also run on a checkout of the git revision REF (a temporary
worktree), interleaved run by run on the same machine, and the CPU-time ratio of this tree to
REF is printed per size (noise hits both alike). This prints figures; it asserts nothing.
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
MAX_NODES = 4096  # a node group's count, or its number of hosts, is at most this
AWS = """\
name: bench
purpose: training
owner: bench@example.com
target:
  type: aws
  region: us-east-1
  availability_zone: us-east-1a
  ssh_cidrs: [10.20.0.0/16]
node_groups:
  - name: gpu
    instance_type: p5.48xlarge
    count: {nodes}
network: {{fabric: efa}}
"""
BARE_METAL = """\
name: bench
purpose: training
owner: bench@example.com
target:
  type: bare_metal
  ssh_user: ubuntu
  private_cidr: 10.0.0.0/16
node_groups:
  - name: hgx
    gpu: H100-SXM
    gpus_per_node: 8
    hosts:
{hosts}
network: {{fabric: infiniband}}
"""
TARGETS = ("aws", "bare_metal")


def blueprint(target: str, nodes: int) -> str:
    """A training cluster of `nodes` nodes on `target`."""
    if target == "aws":
        return AWS.format(nodes=nodes)
    hosts = "\n".join(
        f"      - {{name: hgx-{i}, address: 10.0.{i >> 8}.{i & 255}}}" for i in range(1, nodes + 1)
    )
    return BARE_METAL.format(hosts=hosts)


def write_blueprints(tmp: str, target: str, sizes: list[int]) -> dict[int, Path]:
    paths = {}
    for n in sizes:
        paths[n] = Path(tmp) / f"bench-{target}-{n}.yaml"
        paths[n].write_text(blueprint(target, n), encoding="utf-8")
    return paths


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(path: Path, tree: Path = ROOT) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the child, resources planned), with the rackform of `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cpu = _child_cpu()
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "rackform", "plan", str(path), "--json"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"plan failed for {path}:\n{done.stderr}")
    return elapsed, _child_cpu() - cpu, len(json.loads(done.stdout)["resources"])


def compare(ref: str, sizes: list[int], repeat: int, paths: dict[int, Path]) -> None:
    """This tree against a worktree of `ref`, interleaved, CPU-time medians and their ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "ref"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(other), ref],
            check=True,
        )
        try:
            run_once(paths[sizes[0]], other)  # warm its bytecode cache too; not counted
            print(f"this tree against {ref} (CPU s, median of {repeat}, runs interleaved):")
            print(f"{'nodes':>6} {ref[:12]:>12} {'this tree':>10} {'ratio':>6}")
            for n in sizes:
                before, after = [], []
                for _ in range(repeat):
                    before.append(run_once(paths[n], other)[1])
                    after.append(run_once(paths[n])[1])
                b, a = statistics.median(before), statistics.median(after)
                print(f"{n:>6} {b:>12.2f} {a:>10.2f} {a / b:>6.2f}")
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], check=True
            )


def _owner(file: str) -> str:
    """Whose code a profiled function is: rackform's, the Pulumi SDK's (pulumi, pulumi_aws, its
    protobuf and grpc), asyncio (which the SDK runs every registration on), the interpreter's
    built-ins (called from all of them), the rest of the standard library, another package."""
    if "/rackform/" in file:
        return "rackform"
    if "site-packages/" in file:
        package = file.split("site-packages/", 1)[1].split("/", 1)[0]
        sdk = package.startswith(("pulumi", "google", "grpc"))
        return "pulumi SDK and its protobuf/grpc" if sdk else f"{package}"
    if "asyncio" in file:
        return "asyncio"
    return "built-ins" if file == "~" else "standard library"


def attribute(path: Path) -> None:
    """One profiled run: its time by whose code ran (each function's own time, not counting what
    it called). What is not rackform's is the floor of an offline plan under Pulumi's mocks."""
    import pstats

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.prof"
        subprocess.run(
            [sys.executable, "-m", "cProfile", "-o", str(out), "-m", "rackform", "plan",
             str(path), "--json"],
            cwd=ROOT, check=True, capture_output=True,
        )  # fmt: skip
        shares: dict[str, float] = {}
        for (file, _line, _fn), (_cc, _nc, own, _cum, _callers) in pstats.Stats(
            str(out)
        ).stats.items():
            shares[_owner(file)] = shares.get(_owner(file), 0.0) + own
    total = sum(shares.values())
    print(f"where the time of {path.name} goes (profiled, so slower than the figures above):")
    for who, t in sorted(shares.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {who:<34} {t:>6.2f} s {100 * t / total:>5.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default="1,8,64,512", help=f"node counts, 1 to {MAX_NODES}")
    ap.add_argument("--target", choices=TARGETS, default="aws")
    ap.add_argument("--against", metavar="REF", help="also time the git revision REF")
    ap.add_argument(
        "--attribute",
        action="store_true",
        help="profile the largest size: whose code takes the time",
    )
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if not all(1 <= n <= MAX_NODES for n in sizes):
        ap.error(f"--sizes: every size must be between 1 and {MAX_NODES}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"rackform plan benchmark: {platform.python_implementation()} {platform.python_version()}, "
        f"{cores} cores available, median of {args.repeat}, target {args.target}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_blueprints(tmp, args.target, sizes)
        run_once(paths[sizes[0]])  # warm the bytecode caches; not counted
        rows = []
        for n in sizes:
            walls, cpus, resources = [], [], 0
            for _ in range(args.repeat):
                wall, cpu, resources = run_once(paths[n])
                walls.append(wall)
                cpus.append(cpu)
            rows.append((n, resources, statistics.median(walls), statistics.median(cpus)))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average at the end: {load:.2f} (wall time is only meaningful on an idle machine)")
    base_n, _, _, base_cpu = rows[0]
    print(
        f"{'nodes':>6} {'resources':>9} {'wall s':>7} {'cpu s':>6} {'wall ms/node':>12} "
        f"{'marginal cpu ms/node':>21}"
    )
    for n, resources, wall, cpu in rows:
        marginal = (cpu - base_cpu) / (n - base_n) * 1000 if n != base_n else float("nan")
        print(
            f"{n:>6} {resources:>9} {wall:>7.2f} {cpu:>6.2f} {wall / n * 1000:>12.1f} "
            f"{marginal:>21.2f}"
        )
    if len(rows) >= 3:
        n_mid, _, _, c_mid = rows[-2]
        n_big, _, _, c_big = rows[-1]
        per_mid = (c_mid - base_cpu) / (n_mid - base_n)
        per_big = (c_big - base_cpu) / (n_big - base_n)
        print(
            f"marginal CPU time per node, {n_big} vs {n_mid} nodes: {per_big / per_mid:.2f}x "
            "(1.00 = linear)"
        )
    if args.target == "aws" and 512 in sizes:
        wall = next(r[2] for r in rows if r[0] == 512)
        verdict = "within" if wall <= 5.0 else "OVER"
        print(f"512 nodes: {wall:.2f} s wall (median), {verdict} the 5 s target")
    if args.attribute:
        with tempfile.TemporaryDirectory() as tmp:
            attribute(write_blueprints(tmp, args.target, sizes[-1:])[sizes[-1]])
    if args.against:
        with tempfile.TemporaryDirectory() as tmp:
            paths = write_blueprints(tmp, args.target, sizes)
            compare(args.against, sizes, args.repeat, paths)


if __name__ == "__main__":
    main()
