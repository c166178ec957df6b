"""Whole-process `rackform plan` time for clusters of 1, 8, 64 and 512 nodes (by default; any
sizes up to a node group's maximum of 4096), of one shape (`--target`): `aws` (training, one
group of p5.48xlarge, an instance each; the default), `aws_groups` (four groups of two instance
types, spot, Slurm's controller, planned in an environment), `aws_inference` (one autoscaling
group), `bare_metal` (8 x H100 hosts, each listed), `bare_metal_slurm` (two groups in racks,
Slurm, an environment), `colocation` (L40S hosts in racks with power budgets). A fresh
`python -m rackform plan FILE [--env ENV] --json` per run (interpreter start, imports, loading,
the program under Pulumi's mock runtime, output), median of --repeat runs, with each size's CPU
time per node and what each further node cost since the size before.

    .venv/bin/python benchmarks/plan_bench.py [--repeat 3] [--sizes 512,1024,2048,4096]
        [--target SHAPE] [--floor] [--attribute] [--against REF]

Target: 512 AWS nodes in 5 s or less on a 2-core machine, growing close to linearly; 4,096
nodes in 8 s of CPU or less (issue 42). `--floor` also times, interleaved with the plans, a bare
Pulumi program that registers the same resources (types, names, parents, inputs, dependencies
and options) under the same mocks, and nothing else (benchmarks/plan_floor.py): the floor of
any offline plan that runs the real program; what the plan spends above it is rackform's.
`--attribute` profiles the largest size once and prints whose code the time is spent in. With
`--against REF` the same sizes also run on a checkout of the git revision REF (a temporary
worktree), interleaved run by run on the same machine, and the CPU-time ratio of this tree to
REF is printed per size (noise hits both alike). CPU time grows with the machine's load too
(other processes share the cores and their caches): the load is printed. This prints figures;
it asserts nothing.
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
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_NODES = 4096  # a node group's count, or its number of hosts, is at most this
HEAD = "name: bench\npurpose: {purpose}\nowner: bench@example.com\n"
AWS_TARGET = """\
target:
  type: aws
  region: us-east-1
  availability_zone: us-east-1a
  ssh_cidrs: [10.20.0.0/16]
"""
ONPREM_GROUP = "  - name: {name}\n    gpu: {gpu}\n    gpus_per_node: 8\n    hosts:\n"


def _hosts(prefix: str, first: int, count: int, rack_size: int = 0) -> str:
    """`count` hosts from `first` on, each on its own address; in racks of `rack_size`."""
    lines = []
    for i in range(first, first + count):
        rack = f", rack: r{(i - 1) // rack_size:03d}" if rack_size else ""
        lines.append(
            f"      - {{name: {prefix}-{i}, address: 10.{i >> 16}.{(i >> 8) & 255}.{i & 255}{rack}}}"
        )
    return "\n".join(lines) + "\n"


def _split(nodes: int, parts: int) -> list[int]:
    """`nodes` in `parts` groups as even as can be (none empty where nodes >= parts)."""
    return [n for n in (nodes // parts + (i < nodes % parts) for i in range(parts)) if n]


def aws(nodes: int) -> tuple[str, str | None]:
    """A training cluster: one group of p5.48xlarge, an instance each."""
    return (
        HEAD.format(purpose="training")
        + AWS_TARGET
        + f"node_groups:\n  - name: gpu\n    instance_type: p5.48xlarge\n    count: {nodes}\n"
        + "network: {fabric: efa}\n",
        None,
    )


def aws_groups(nodes: int) -> tuple[str, str | None]:
    """A training cluster of four node groups (two instance types, spot) with Slurm's
    controller instance, planned in its `prod` environment."""
    groups = "".join(
        f"  - name: gpu-{chr(97 + i)}\n    instance_type: {('p5.48xlarge', 'p4d.24xlarge')[i % 2]}"
        f"\n    count: {n}\n"
        for i, n in enumerate(_split(nodes, 4))
    )
    names = ", ".join(f"gpu-{chr(97 + i)}" for i in range(len(_split(nodes, 4))))
    return (
        HEAD.format(purpose="training")
        + AWS_TARGET
        + "  market: spot\n  ami: {image: ubuntu-24.04}\n"
        + f"node_groups:\n{groups}"
        + "network: {fabric: efa}\n"
        + "workload: {model_params_b: 8, method: pretrain, checkpoint_interval_min: 30}\n"
        + "scheduler:\n  type: slurm\n  partitions:\n"
        + f"    - {{name: batch, node_groups: [{names}], default: true}}\n"
        + "environments:\n  dev: {node_groups: [{name: gpu-a, count: 1}]}\n  prod: {}\n",
        "prod",
    )


def aws_inference(nodes: int) -> tuple[str, str | None]:
    """A serving cluster: one autoscaling group of g6e.12xlarge starting at `nodes`."""
    return (
        HEAD.format(purpose="inference")
        + AWS_TARGET
        + "node_groups:\n  - name: serve\n    instance_type: g6e.12xlarge\n"
        + f"    count: {nodes}\n    min_count: 1\n    max_count: {MAX_NODES}\n"
        + "network: {fabric: ethernet}\n"
        + "workload: {model_params_b: 8, method: serve, seq_len: 8192}\n",
        None,
    )


def bare_metal(nodes: int) -> tuple[str, str | None]:
    """A training cluster of 8 x H100 hosts, each listed."""
    return (
        HEAD.format(purpose="training")
        + "target:\n  type: bare_metal\n  ssh_user: ubuntu\n  private_cidr: 10.0.0.0/8\n"
        + "node_groups:\n"
        + ONPREM_GROUP.format(name="hgx", gpu="H100-SXM")
        + _hosts("hgx", 1, nodes)
        + "network: {fabric: infiniband}\n",
        None,
    )


def bare_metal_slurm(nodes: int) -> tuple[str, str | None]:
    """Bare metal in racks of 32: two GPU groups (H100, A100) and Slurm with its controller on
    the first host, planned in its `prod` environment."""
    first, second = _split(nodes, 2) + [0] * (2 - len(_split(nodes, 2)))
    text = (
        HEAD.format(purpose="training")
        + "target:\n  type: bare_metal\n  ssh_user: ubuntu\n  private_cidr: 10.0.0.0/8\n"
        + "node_groups:\n"
        + ONPREM_GROUP.format(name="hgx", gpu="H100-SXM")
        + _hosts("hgx", 1, first, rack_size=32)
    )
    if second:
        text += ONPREM_GROUP.format(name="dgx", gpu="A100-SXM-80GB") + _hosts(
            "dgx", first + 1, second, rack_size=32
        )
    partitions = "[hgx, dgx]" if second else "[hgx]"
    return (
        text
        + "network: {fabric: infiniband}\n"
        + "scheduler:\n  type: slurm\n  controller: hgx-1\n  partitions:\n"
        + f"    - {{name: batch, node_groups: {partitions}, default: true}}\n"
        + "environments:\n  prod: {}\n",
        "prod",
    )


def colocation(nodes: int) -> tuple[str, str | None]:
    """Serving on L40S hosts in a colocation site's racks of 16, each with its power budget."""
    racks = "".join(f"    - {{name: r{r:03d}, power_kw: 60}}\n" for r in range((nodes + 15) // 16))
    return (
        HEAD.format(purpose="inference")
        + "target:\n  type: colocation\n  site: bench-cage\n  ssh_user: ops\n"
        + f"  racks:\n{racks}"
        + "node_groups:\n"
        + ONPREM_GROUP.format(name="l40s", gpu="L40S")
        + _hosts("l40s", 1, nodes, rack_size=16)
        + "network: {fabric: ethernet}\n"
        + "workload: {model_params_b: 70, method: serve, seq_len: 8192}\n",
        None,
    )


SHAPES = {
    f.__name__: f
    for f in (aws, aws_groups, aws_inference, bare_metal, bare_metal_slurm, colocation)
}


def blueprint(target: str, nodes: int) -> str:
    """The blueprint of shape `target` at `nodes` nodes."""
    return SHAPES[target](nodes)[0]


@dataclass(frozen=True)
class Blueprint:
    """One size of a shape, in a directory of its own (AWS's quota rule reads the blueprints
    beside one: none here), planned in `env` (None: the base)."""

    nodes: int
    path: Path
    env: str | None

    def plan_argv(self) -> list[str]:
        env = ["--env", self.env] if self.env else []
        return [sys.executable, "-m", "rackform", "plan", str(self.path), *env, "--json"]


def write_blueprints(tmp: str, target: str, sizes: list[int]) -> dict[int, Blueprint]:
    out = {}
    for n in sizes:
        text, env = SHAPES[target](n)
        path = Path(tmp) / f"{target}-{n}" / "bench.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        out[n] = Blueprint(n, path, env)
    return out


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], tree: Path = ROOT) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child, its stdout), with the rackform of `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cpu = _child_cpu()
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr}")
    return elapsed, _child_cpu() - cpu, done.stdout


def run_once(bp: Blueprint, tree: Path = ROOT) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the child, resources planned), with the rackform of `tree`."""
    wall, cpu, out = timed(bp.plan_argv(), tree)
    return wall, cpu, len(json.loads(out)["resources"])


FLOOR = Path(__file__).resolve().parent / "plan_floor.py"


def floor_once(records: Path) -> tuple[float, dict]:
    """(CPU seconds of the floor's process without rackform's recorder module, its stages)."""
    _, cpu, out = timed([sys.executable, str(FLOOR), "run", str(records)])
    stages = json.loads(out)
    if stages["differs"]:
        raise SystemExit(f"the floor registered these otherwise: {stages['differs'][:5]}")
    return cpu - stages["recorder_import"] - stages["recorder_own"], stages


def floor(sizes: list[int], repeat: int, bps: dict[int, Blueprint], tmp: str) -> None:
    """The plan against its floor: a bare program registering the same resources under the same
    mocks (benchmarks/plan_floor.py), runs interleaved; what is above the floor is rackform's."""
    print(
        f"the floor (a bare Pulumi program registering the same resources, inputs, parents and "
        f"dependencies under the same mocks), CPU s, median of {repeat}, runs interleaved:"
    )
    print(
        f"{'nodes':>6} {'plan':>6} {'floor':>6} {'above':>6} {'floor %':>7} "
        f"{'start':>6} {'SDK imports':>11} {'registering':>11} {'above ms/node':>13}"
    )
    rows = []
    for n in sizes:
        records = Path(tmp) / f"records-{n}.json"
        subprocess.run(
            [sys.executable, str(FLOOR), "record", str(bps[n].path), str(records),
             *([bps[n].env] if bps[n].env else [])],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True,
        )  # fmt: skip
        plans, floors, stages = [], [], []
        for _ in range(repeat):
            plans.append(run_once(bps[n])[1])
            cpu, st = floor_once(records)
            floors.append(cpu)
            stages.append(st)
        p, f = statistics.median(plans), statistics.median(floors)
        mid = {
            k: statistics.median(s[k] for s in stages) for k in ("start", "sdk_imports", "register")
        }
        print(
            f"{n:>6} {p:>6.2f} {f:>6.2f} {p - f:>6.2f} {100 * f / p:>6.0f}% {mid['start']:>6.2f} "
            f"{mid['sdk_imports']:>11.2f} {mid['register']:>11.2f} {(p - f) / n * 1000:>13.2f}"
        )
        rows.append((n, p, f))
    if len(rows) >= 2:
        (n0, p0, f0), (n1, p1, f1) = rows[0], rows[-1]
        print(
            f"each node from {n0} to {n1}: {(p1 - p0) / (n1 - n0) * 1000:.2f} ms of CPU, of which "
            f"the floor {(f1 - f0) / (n1 - n0) * 1000:.2f} ms and rackform "
            f"{((p1 - p0) - (f1 - f0)) / (n1 - n0) * 1000:.2f} ms"
        )


def compare(ref: str, sizes: list[int], repeat: int, bps: dict[int, Blueprint]) -> None:
    """This tree against a worktree of `ref`, interleaved, CPU-time medians and their ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "ref"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(other), ref],
            check=True,
        )
        try:
            run_once(bps[sizes[0]], other)  # warm its bytecode cache too; not counted
            print(f"this tree against {ref} (CPU s, median of {repeat}, runs interleaved):")
            print(f"{'nodes':>6} {ref[:12]:>12} {'this tree':>10} {'ratio':>6}")
            for n in sizes:
                before, after = [], []
                for _ in range(repeat):
                    before.append(run_once(bps[n], other)[1])
                    after.append(run_once(bps[n])[1])
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


def attribute(bp: Blueprint) -> None:
    """One profiled run: its time by whose code ran (each function's own time, not counting what
    it called). The SDK's share here includes what rackform's program asks of it; `--floor`
    measures what any program registering the same resources costs."""
    import pstats

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.prof"
        subprocess.run(
            [sys.executable, "-m", "cProfile", "-o", str(out), *bp.plan_argv()[1:]],
            cwd=ROOT, check=True, capture_output=True,
        )  # fmt: skip
        shares: dict[str, float] = {}
        for (file, _line, _fn), (_cc, _nc, own, _cum, _callers) in pstats.Stats(
            str(out)
        ).stats.items():
            shares[_owner(file)] = shares.get(_owner(file), 0.0) + own
    total = sum(shares.values())
    print(f"where the time of {bp.nodes} nodes goes (profiled, so slower than the figures above):")
    for who, t in sorted(shares.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {who:<34} {t:>6.2f} s {100 * t / total:>5.1f}%")


def per_node(rows: list[tuple[int, int, float, float]]) -> None:
    """Each size's figures, with the CPU time per node and what each further node cost since
    the size before (equal from size to size: linear)."""
    print(
        f"{'nodes':>6} {'resources':>9} {'wall s':>7} {'cpu s':>6} {'cpu ms/node':>11} "
        f"{'marginal cpu ms/node':>21}"
    )
    marginals = []
    for i, (n, resources, wall, cpu) in enumerate(rows):
        marginal = float("nan")
        if i and n != rows[i - 1][0]:
            marginal = (cpu - rows[i - 1][3]) / (n - rows[i - 1][0]) * 1000
            marginals.append(marginal)
        print(
            f"{n:>6} {resources:>9} {wall:>7.2f} {cpu:>6.2f} {cpu / n * 1000:>11.2f} "
            f"{marginal:>21.2f}"
        )
    if len(marginals) >= 2 and marginals[0] > 0:
        print(
            f"marginal CPU time per node, last step against the first: "
            f"{marginals[-1] / marginals[0]:.2f}x (1.00 = linear)"
        )
    for n, _, wall, cpu in rows:
        if n == 512:
            print(f"512 nodes: {wall:.2f} s wall (median; the target is 5 s on 2 cores)")
        if n == MAX_NODES:
            verdict = "within" if cpu <= 8.0 else "OVER"
            print(f"{n} nodes: {cpu:.2f} s CPU (median), {verdict} the 8 s target (issue 42)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default="1,8,64,512", help=f"node counts, 1 to {MAX_NODES}")
    ap.add_argument("--target", choices=sorted(SHAPES), default="aws", help="the shape planned")
    ap.add_argument("--against", metavar="REF", help="also time the git revision REF")
    ap.add_argument(
        "--floor",
        action="store_true",
        help="also time the floor: the same resources registered by a bare program",
    )
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
        f"{cores} cores available, median of {args.repeat}, shape {args.target}: "
        f"{' '.join(str(SHAPES[args.target].__doc__).split())}"
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    with tempfile.TemporaryDirectory() as tmp:
        bps = write_blueprints(tmp, args.target, sizes)
        run_once(bps[sizes[0]])  # warm the bytecode caches; not counted
        rows = []
        for n in sizes:
            walls, cpus, resources = [], [], 0
            for _ in range(args.repeat):
                wall, cpu, resources = run_once(bps[n])
                walls.append(wall)
                cpus.append(cpu)
            rows.append((n, resources, statistics.median(walls), statistics.median(cpus)))
        end = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(
            f"load average {load:.2f} at the start, {end:.2f} at the end (CPU time grows with "
            "the load too: compare figures measured at one load, or interleaved)"
        )
        per_node(rows)
        if args.floor:
            floor(sizes, args.repeat, bps, tmp)
        if args.attribute:
            attribute(bps[sizes[-1]])
        if args.against:
            compare(args.against, sizes, args.repeat, bps)


if __name__ == "__main__":
    main()
