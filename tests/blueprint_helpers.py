"""What the tests share: the example blueprints, two small blueprints, and a CLI runner that goes
through the real entry point (exit codes and stderr exactly as a user sees them). Tests import it
by name (`from blueprint_helpers import ...`), never from a conftest.py."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

# ansible-core 2.19 replaces sys.intern with an object when first imported (tests/roles imports
# it in-process), and torch's dynamo, imported later by torch.distributed.checkpoint, then
# refuses to register its substitute for sys.intern. Importing dynamo first keeps the real one.
with contextlib.suppress(ImportError):  # torch is a test extra
    import torch._dynamo  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "blueprints").glob("*.yaml"))


def rackform(
    *args: str, cwd: Path | None = None, timeout: int = 120
) -> subprocess.CompletedProcess:
    """Run the real `rackform` command in a subprocess. `timeout` only guards against a hang:
    beside the e2e's VMs (scripts/test.sh runs the rest at nice 10) a command that takes 10 s
    alone can take ten times as long."""
    return subprocess.run(
        [sys.executable, "-m", "rackform", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        timeout=timeout,
    )


def validate_text(tmp_path: Path, text: str) -> tuple[Path, subprocess.CompletedProcess]:
    """`rackform validate` of `text` written to tmp_path/bp.yaml: (the file, the run)."""
    f = tmp_path / "bp.yaml"
    f.write_text(text)
    return f, rackform("validate", f)


def located_line(f: Path, r: subprocess.CompletedProcess) -> str:
    """The one line a user mistake in `f` gets (exit 2, no traceback)."""
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith(str(f))]
    assert len(lines) == 1, r.stderr
    return lines[0]


def aws_text(tail: str, count: int = 2) -> str:
    """A small AWS training blueprint (six lines) with `tail` (YAML text) after them: the
    schema tests' base, where the line a mistake is reported at is counted from here."""
    return (
        "name: gpu-train-1\npurpose: training\nowner: a@example.com\n"
        "target: {type: aws, region: us-east-1, availability_zone: us-east-1a,"
        " ssh_cidrs: [10.0.0.0/16]}\n"
        f"node_groups: [{{name: h100-pool, instance_type: p5.48xlarge, count: {count}}}]\n"
        "network: {fabric: efa}\n" + tail
    )


def bare_text(tail: str, hosts: int = 1, racks: tuple[str, ...] = ()) -> str:
    """A small bare-metal training blueprint: group `hgx` of 8 x H100 SXM hosts hgx-01... (one
    line each, the i-th in racks[i] where given), ethernet, then `tail`."""
    lines = []
    for i in range(1, hosts + 1):
        rack = f", rack: {racks[i - 1]}" if racks else ""
        lines.append(f"      - {{name: hgx-{i:02d}, address: 10.0.0.{i}{rack}}}\n")
    return (
        "name: dc-train\npurpose: training\nowner: a@example.com\n"
        "target: {type: bare_metal, capex_usd_per_gpu: 30000, amortize_months: 36}\n"
        "node_groups:\n  - name: hgx\n    gpu: H100-SXM\n    gpus_per_node: 8\n    hosts:\n"
        + "".join(lines)
        + "network: {fabric: ethernet}\n"
        + tail
    )


AWS_TRAINING = """
name: t-cluster
purpose: training
owner: team@example.com
target:
  type: aws
  region: us-east-1
  availability_zone: us-east-1a
  ssh_cidrs: [10.20.0.0/16]
node_groups:
  - name: gpu
    instance_type: p5.48xlarge
    count: 2
network: {fabric: efa}
"""

BARE_METAL = """
name: bm-cluster
purpose: training
owner: team@example.com
target: {type: bare_metal}
node_groups:
  - name: hgx
    gpu: H100-SXM
    gpus_per_node: 8
    hosts:
      - {name: n1, address: 10.0.0.1}
      - {name: n2, address: 10.0.0.2}
network: {fabric: infiniband}
"""

# Four bare-metal nodes of a 13B full fine-tune over plain ethernet: preflight's fabric-missing
# error, so every command that acts refuses it.
FULL_ON_ETHERNET = (
    BARE_METAL.replace("fabric: infiniband", "fabric: ethernet").replace(
        "      - {name: n2, address: 10.0.0.2}",
        "      - {name: n2, address: 10.0.0.2}\n"
        "      - {name: n3, address: 10.0.0.3}\n"
        "      - {name: n4, address: 10.0.0.4}",
    )
    + "workload: {model_params_b: 13, method: full}\n"
)

# BARE_METAL with a CPU-only host c1 (in no rack) beside the two H100 nodes, shared through
# Slurm: c1 runs slurmctld; `spare` spans every node at a lower, preemptible tier.
SLURM_MIXED = (
    BARE_METAL.replace(
        "network:", "  - name: cpu\n    hosts:\n      - {name: c1, address: 10.0.0.9}\nnetwork:"
    )
    + """
scheduler:
  type: slurm
  controller: c1
  partitions:
    - {name: gpu, node_groups: [hgx], default: true, priority_tier: 5}
    - {name: spare, node_groups: [hgx, cpu], priority_tier: 1, preemptible: true, max_time_min: 60}
  preemption: {grace_s: 45}
"""
)
