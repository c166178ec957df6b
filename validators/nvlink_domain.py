"""A rack-scale NVLink domain (GB200/GB300 NVL72: 18 compute trays of 4 GPUs, one domain) as
the host checks see it from a tray. Two checks here, and what they feed:

- `gpu_fabric`: every GPU of the tray registered with the NVLink fabric. `nvidia-smi -q` prints a
  `Fabric` section per GPU (NVIDIA's nvidia-smi documentation,
  https://docs.nvidia.com/deploy/nvidia-smi/index.html; the fields are NVML's
  nvmlGpuFabricInfo_t, https://docs.nvidia.com/deploy/nvml-api/structnvmlGpuFabricInfo__t.html:
  the registration's state, its status "to be checked only when the state is complete", the
  cluster UUID and the clique id the GPU belongs to). A pass: every GPU `Completed` with
  `Success`, and all of the tray's GPUs in one cluster and one clique, which is what the check
  measures, so the trays can be compared.
- `nvlink_domain_clique` (not here: rackform/acceptance/cliques.py): every tray of a domain
  reports the same cluster UUID and clique id (each tray's `gpu_fabric` measurement), judged by
  the Validate stage, where the trays' reports are together.
- `imex_domain`: IMEX's domain up, as `nvidia-imex-ctl -N` shows it (the IMEX guide's "IMEX
  Service Command Service", https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/cmdservice.html):
  each of the domain's tray addresses listed and `READY`, none listed that is not one of them,
  every pair in the connectivity table `C` (connected), and `Domain State: UP`.

Standard library only. Not yet run on a GB200 tray: tested on outputs in the documented formats
(tests/validators/recorded/).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from validators import report
from validators.report import Check, failed

_GPU = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_UNSET = ("", "N/A", "n/a")


@dataclass(frozen=True)
class GpuFabric:
    gpu: str  # the GPU's PCI bus id, from its `GPU 00000008:01:00.0` heading
    state: str = ""  # Completed, In Progress, Not Started, Not Supported ("": no Fabric section)
    status: str = ""
    clique: str = ""
    cluster: str = ""

    @property
    def registered(self) -> bool:
        return (
            self.state.lower() == "completed"
            and self.status.lower() == "success"
            and self.clique not in _UNSET
            and self.cluster not in _UNSET
        )


def parse_fabric(text: str) -> list[GpuFabric]:
    """Each GPU of `nvidia-smi -q`'s output with its Fabric section's first-level fields
    (`State`, `Status`, `CliqueId`, `ClusterUUID`; the `Health` block below them is not read).
    Lines that are none of these, blank lines and spacing are ignored."""
    gpus: list[GpuFabric] = []
    fields: dict[str, str] = {}
    gpu = ""
    fabric_at = child_at = -1

    def close() -> None:
        if gpu:
            gpus.append(
                GpuFabric(
                    gpu,
                    fields.get("State", ""),
                    fields.get("Status", ""),
                    fields.get("CliqueId", ""),
                    fields.get("ClusterUUID", ""),
                )
            )

    for raw in text.splitlines():
        line = raw.rstrip()
        m = _GPU.match(line)
        if m:
            close()
            gpu, fields, fabric_at, child_at = m.group(1), {}, -1, -1
            continue
        stripped = line.strip()
        if not gpu or not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if stripped == "Fabric":
            fabric_at, child_at = indent, -1
            continue
        if fabric_at < 0:
            continue
        if indent <= fabric_at:
            fabric_at = -1  # the section ended
            continue
        if child_at < 0:
            child_at = indent
        key, sep, value = stripped.partition(":")
        if sep and indent == child_at:
            fields[key.strip()] = value.strip()
    close()
    return gpus


def identity(g: GpuFabric) -> str:
    """What `gpu_fabric` measures: the cluster and clique a tray's GPUs are in."""
    return f"cluster {g.cluster} clique {g.clique}"


def fabric_check(
    gpus: Sequence[GpuFabric], node: str = "", expect_gpus: int | None = None
) -> Check:
    name, expected = "gpu_fabric", "every GPU Completed/Success, one cluster and clique"
    if not gpus:
        why = "nvidia-smi -q listed no GPU"
        return failed(name, why, expected=expected, op="==", node=node)
    if expect_gpus is not None and len(gpus) != expect_gpus:
        why = f"nvidia-smi -q listed {len(gpus)} GPUs, {expect_gpus} expected"
        return failed(name, why, measured=f"{len(gpus)} GPUs", expected=expected, node=node)
    bad = [g for g in gpus if not g.registered]
    if bad:
        shown = "; ".join(
            f"{g.gpu}: state {g.state or 'missing'}, status {g.status or 'missing'}"
            + (f", clique {g.clique or 'missing'}" if g.clique in _UNSET else "")
            + (f", cluster {g.cluster or 'missing'}" if g.cluster in _UNSET else "")
            for g in bad
        )
        measured = f"{len(gpus) - len(bad)} of {len(gpus)} GPUs registered"
        why = f"not registered with the NVLink fabric: {shown}"
        return failed(name, why, measured=measured, expected=expected, op="==", node=node)
    ids = sorted({identity(g) for g in gpus})
    if len(ids) > 1:
        by = "; ".join(f"{i}: {', '.join(g.gpu for g in gpus if identity(g) == i)}" for i in ids)
        why = f"the tray's GPUs are in {len(ids)} cliques ({by})"
        return failed(name, why, measured=" / ".join(ids), expected=expected, op="==", node=node)
    detail = f"{len(gpus)} GPUs Completed/Success"
    return Check(name, report.PASS, ids[0], expected, "", "==", detail, node)


@dataclass(frozen=True)
class ImexDomain:
    nodes: tuple[tuple[str, str], ...]  # each listed node's address and status, in order
    links: tuple[tuple[int, int, str], ...]  # each (from, to, state) of the connectivity table
    state: str  # the Domain State line's word ("": none)


_NODE = re.compile(r"^\s*Node\s*#\s*(\d+)\s+-\s+(.+?)\s*$")
_ROW = re.compile(r"^\s*(\d+)((?:\s+[A-Z])+)\s*$")
_DOMAIN = re.compile(r"^\s*Domain State\s*:\s*(\S+)\s*$", re.IGNORECASE)


def parse_imex(text: str) -> ImexDomain:
    """`nvidia-imex-ctl -N`'s node list (`Node #<i> - <address> - <status>`, a host name between
    them with -H), its connectivity table's rows and its Domain State. Other lines (the legend,
    the time stamp, whatever a later version adds) and spacing are ignored."""
    nodes: list[tuple[str, str]] = []
    links: list[tuple[int, int, str]] = []
    state = ""
    in_table = False
    for line in text.splitlines():
        m = _NODE.match(line)
        if m:
            parts = [p.strip() for p in re.split(r"\s+-\s+", m.group(2))]
            nodes.append((parts[0], parts[-1] if len(parts) > 1 else ""))
            continue
        if "From" in line and "To" in line and "Nodes" in line:
            in_table = True
            continue
        d = _DOMAIN.match(line)
        if d:
            state, in_table = d.group(1), False
            continue
        r = _ROW.match(line) if in_table else None
        if r:
            links += [(int(r.group(1)), j, c) for j, c in enumerate(r.group(2).split())]
    return ImexDomain(tuple(nodes), tuple(links), state)


def imex_check(text: str | None, members: Sequence[str], node: str = "", why: str = "") -> Check:
    """`text`: what `nvidia-imex-ctl -N` printed (None: it could not be run, `why` says how)."""
    name = "imex_domain"
    expected = f"{len(members)} trays READY and connected, Domain State UP"
    if text is None:
        return failed(name, why or "nvidia-imex-ctl -N gave nothing", expected=expected, node=node)
    got = parse_imex(text)
    listed = [a for a, _s in got.nodes]
    problems = []
    missing = [a for a in members if a not in listed]
    if missing:
        problems.append(f"not in IMEX's list: {', '.join(missing)}")
    extra = [a for a in listed if a not in members]
    if extra:
        problems.append(f"listed but not of this domain: {', '.join(extra)}")
    not_ready = [f"{a} {s or 'no status'}" for a, s in got.nodes if s != "READY"]
    if not_ready:
        problems.append(f"not READY: {', '.join(not_ready)}")
    cut = [(i, j, c) for i, j, c in got.links if c != "C"]
    if cut:

        def addr(k: int) -> str:
            return listed[k] if k < len(listed) else f"#{k}"

        pairs = ", ".join(f"{addr(i)} to {addr(j)} ({c})" for i, j, c in cut[:6])
        problems.append(f"not connected: {pairs}")
    if got.state != "UP":
        problems.append(f"Domain State {got.state or 'missing'}")
    ready = sum(s == "READY" for a, s in got.nodes if a in members)
    measured = f"{ready} of {len(members)} READY, Domain State {got.state or 'missing'}"
    if problems:
        return failed(name, "; ".join(problems), measured=measured, expected=expected, node=node)
    detail = f"{len(listed)} trays, {len(got.links)} links connected"
    return Check(name, report.PASS, measured, expected, "", "==", detail, node)
