"""How many nodes a push works on at once: Ansible's forks, bounded by the controller's memory
and the tunnel's connections, and the batches the GPU roles' play takes where the cluster is
wider than the forks."""

from __future__ import annotations

import math
from pathlib import Path

from rackform.catalog.preflight import load_preflight_figures
from rackform.plan.configuring import fork_width


def forks(nodes: int, tunnelled: bool, available_mib: int | None = -1) -> tuple[int, str]:
    """How many nodes Ansible works on at once, and why not every one where it is fewer: every
    node (the smoke job's rendezvous needs all of them running; it runs detached, so fewer
    forks still start every node), bounded as `rackform plan` says it will be (`fork_width`, the
    catalog's figures), with the controller's memory read now (`available_mib`: from
    /proc/meminfo when -1; None: unknown, not capped)."""
    mib = available_memory_mib() if available_mib == -1 else available_mib
    return fork_width(nodes, tunnelled, mib, load_preflight_figures().configure)


def available_memory_mib(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable (the kernel's estimate of what can be allocated without swapping), or None
    where there is no such file (not Linux)."""
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def batches(nodes: int, width: int, batch: int | None) -> int:
    """How many nodes the GPU roles' play takes at a time (0: every node, one batch): `batch`
    where given, else, where the cluster is wider than the forks, as many rounds of the fork
    width as it takes, evened out (21 nodes in 20 forks: 11 and 10, not 20 and 1, since a
    batch whose every node fails ends the run), which keeps the forks busy and stops a bad
    change after the first batch."""
    if batch is not None:
        return 0 if batch >= nodes else batch
    if nodes <= width:
        return 0
    return math.ceil(nodes / math.ceil(nodes / width))
