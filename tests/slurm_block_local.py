"""A real Slurm with the topology/block plugin on this machine: Debian 13's Slurm 24.11 (or
another suite's: forky's 26.05 reads topology.yaml), from a root debootstrapped once into
rackform's cache (rackform/testbed/slurm_root.py), run as
tests/slurm_local.py runs Debian 12's (auth/none, one slurmd per node on its own loopback port,
in the foreground, everything stopped at the end) but each daemon and command inside that root.

Inside the root: each process gets a mount namespace of its own (`unshare --mount`, private
propagation) holding /proc, /sys and /dev, and this machine's directory above the cluster's files
(/tmp for pytest's temp dirs) at the same path, then `chroot`: so every path in slurm.conf is the
same inside and out, and the mounts vanish with the process, leaving nothing mounted in the cache.

The cluster is made from a topology.conf (`block_cluster(topology)`): its nodes are the ones its
`BlockName=` lines name (Slurm's hostlist expressions), each with `gpus` GPUs as GRES (plain
files, as tests/slurm_local.py explains), slurm.conf says `TopologyPlugin=topology/block`, and
the file is put beside slurm.conf as Slurm reads it. Building the root needs root; where this
runs as another user the fixtures skip, saying so (CI runs as root and builds it).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from slurm_local import LocalSlurm, start

from rackform.scheduler.hostlist import expand
from rackform.testbed.image import ImageError
from rackform.testbed.slurm_root import SUITES, ensure_root, slurm_version

GPUS_PER_NODE = 4  # a GB200 NVL72 compute tray's four GPUs

_LINE = re.compile(r"^\s*BlockName\s*=\s*(\S+)\s+Nodes\s*=\s*(\S+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Topology:
    text: str  # the topology.conf as given
    blocks: dict[str, tuple[str, ...]]  # each BlockName with its nodes, in the file's order

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for members in self.blocks.values() for n in members)

    def block_of(self, node: str) -> str:
        return next(b for b, members in self.blocks.items() if node in members)


def read_topology(text: str) -> Topology:
    """The blocks of a topology.conf in Slurm's block format (`BlockName=<name> Nodes=<hostlist>`;
    `BlockSizes=` and comments are Slurm's to read, not this harness's)."""
    blocks = {}
    for line in text.splitlines():
        m = _LINE.match(line.split("#", 1)[0])
        if m:
            blocks[m.group(1)] = tuple(expand(m.group(2)))
    if not blocks:
        raise ValueError("the topology.conf names no BlockName= line")
    return Topology(text, blocks)


def in_root(root: Path, share: Path) -> tuple[str, ...]:
    """The argv prefix that runs a command inside `root` with /proc, /sys, /dev and this
    machine's `share` mounted there, in a mount namespace of the command's own."""
    script = (
        'set -e; r="$1"; s="$2"; shift 2; '
        'mount -t proc proc "$r/proc"; mount --rbind /sys "$r/sys"; '
        'mount --rbind /dev "$r/dev"; mount --rbind "$s" "$r$s"; exec chroot "$r" "$@"'
    )
    ns = ("unshare", "--mount", "--propagation", "private")
    return (*ns, "sh", "-c", script, "sh", str(root), str(share))


def _share(root: Path, path: Path) -> Path:
    """The highest directory above `path` (not / itself) that the root has too: mounted there,
    `path` is the same path inside the root as outside."""
    top = Path(path.resolve().parts[0]) / path.resolve().parts[1]
    if not (root / top.relative_to("/")).is_dir():
        raise AssertionError(f"{top} (above {path}) is not a directory of the Slurm root {root}")
    return top


@dataclass
class BlockSlurm:
    slurm: LocalSlurm
    topology: Topology
    version: str  # the root's slurmctld package version
    built_s: float | None  # seconds the root's build took now; None: it was cached


def block_cluster(
    tmp: Path,
    topology_text: str,
    suite: str = "trixie",
    topology_yaml: str = "",
    extra_conf: str = "",
) -> BlockSlurm:
    """Slurm of `suite`'s root (trixie: 24.11) up with every node of `topology_text` idle, the
    file as its topology.conf. `topology_yaml`: also written beside it as topology.yaml (Slurm
    25.05 and later read that one and ignore topology.conf); `extra_conf`: lines added to
    slurm.conf (partitions naming a topology of the yaml with `Topology=`)."""
    release = SUITES[suite][0]
    if os.geteuid() != 0:
        pytest.skip(
            f"Slurm {release}'s root is built with debootstrap and run with mounts: needs root"
        )
    for tool in ("debootstrap", "unshare", "chroot"):
        if shutil.which(tool) is None:  # as the suite's other real servers: fail, never skip
            pytest.fail(f"{tool} not installed: run scripts/setup.sh --test")
    topology = read_topology(topology_text)
    try:
        root, built_s = ensure_root(suite)
    except ImageError as exc:
        pytest.fail(f"the Slurm {release} root could not be built: {exc}")
    wrap = in_root(root, _share(root, tmp))

    def write_topology(slurm: LocalSlurm) -> None:
        (slurm.root / "topology.conf").write_text(topology_text)
        if topology_yaml:
            (slurm.root / "topology.yaml").write_text(topology_yaml)

    slurm = start(
        tmp,
        extra_conf="TopologyPlugin=topology/block\n" + extra_conf,
        before=write_topology,
        nodes=topology.nodes,
        gpus=GPUS_PER_NODE,
        wrap=wrap,
    )
    return BlockSlurm(slurm, topology, slurm_version(root), built_s)


def nodes_of(block: BlockSlurm, job: str) -> list[str]:
    """The nodes a job was given, from squeue."""
    out = block.slurm.run("squeue", "--noheader", "-j", job, "-o", "%N").stdout
    return expand(out.strip())


def occupy(block: BlockSlurm, node: str) -> str:
    """A one-node job holding all of `node` (`--exclusive`: no other job shares it), running."""
    job = block.slurm.sbatch("-w", node, "-N1", "--exclusive", "--wrap", "sleep 300")
    block.slurm.wait_state(job, "RUNNING")
    return job
