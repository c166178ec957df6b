"""The links a node's GPUs talk over, read through NVML (the handles hostcheck opens):

- `nvlink_up`: every NVLink of every GPU up, as many as the GPU model has (the catalog's
  `nvlinks`: 18 on an H100 or H200 SXM, 12 on an A100 SXM); a GPU with fewer sends part of its
  traffic the slow way, and one whose links NVML does not report at all (a hypervisor that hides
  them) falls back to PCIe for every peer. Checked where the node has more than one GPU.
- `pcie_link`: each GPU's PCIe link at its full width (a GPU trained down to x8 is a classic
  silent fault: it works, at half the host bandwidth) and at the generation the GPU model runs
  (the catalog's `pcie_gen`) in this system. The current generation is not read: the driver
  lowers it while the GPU idles (nvidia-smi's documentation of `pcie.link.gen.current`); the
  system's maximum (`pcie.link.gen.max`: the GPU's and the slot's) is what a job gets.
- `fabric_manager`: the NVSwitch fabric manager running (`nvidia-fabricmanager`) where the
  node's GPUs reach each other through NVSwitches (the catalog's `nvswitch` with more than one
  GPU, or NVSwitch device files present): without it, CUDA on such a node fails to initialize.

Seen on a GPU host (one H200 passed through to a VM, 2026-11-28): PCIe gen 5 and x16 current
and maximum at idle; every NVLink query NotSupported (a VM of one GPU: no peer, not checked);
no NVSwitch device files. Standard library only, plus the pynvml module hostcheck passes in."""

from __future__ import annotations

import glob
import shutil
import subprocess
from collections.abc import Callable, Sequence

from validators.report import Check, compare, failed, not_run

ENABLED = 1  # NVML_FEATURE_ENABLED
MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS before Blackwell; pynvml's own constant wins
SWITCH_DEVICES = "/dev/nvidia-nvswitch*"


def nvlink_check(nvml, handles: Sequence, expect: int | None, node: str = "") -> Check:
    name = "nvlink_up"
    if not expect:
        return not_run(name, "no NVLink expected on this GPU model", node=node)
    if len(handles) < 2:
        return not_run(name, f"{len(handles)} GPU on the node: no peer to reach", node=node)
    slots = max(getattr(nvml, "NVML_NVLINK_MAX_LINKS", MAX_LINKS), expect)
    ups, bad = [], []
    for i, h in enumerate(handles):
        up, down, hidden = 0, [], 0
        for link in range(slots):
            try:
                state = nvml.nvmlDeviceGetNvLinkState(h, link)
            except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
                hidden += 1
                continue
            except nvml.NVMLError as exc:
                down.append(f"{link} (unreadable: {exc or type(exc).__name__})")
                continue
            if state == ENABLED:
                up += 1
            else:
                down.append(str(link))
        ups.append(up)
        if up < expect:
            why = (
                "no NVLink reported (PCIe for every peer)"
                if hidden == slots
                else f"{up}/{expect} up" + (f", down: {', '.join(down)}" if down else "")
            )
            bad.append(f"GPU {i}: {why}")
    detail = "; ".join(bad) or f"{expect} links up on each of {len(handles)} GPUs"
    return compare(name, min(ups), expect, "links", ">=", detail=detail, node=node)


def _read(nvml, call: str, h) -> int | None:
    fn = getattr(nvml, call, None)  # an older pynvml may lack it
    if fn is None:
        return None
    try:
        return int(fn(h))
    except Exception:  # NotSupported, a GPU off the bus
        return None


def pcie_check(nvml, handles: Sequence, expect_gen: int | None, node: str = "") -> Check:
    name = "pcie_link"
    if not handles:
        return not_run(name, "NVML sees no GPU to read", node=node)
    bad = []
    for i, h in enumerate(handles):
        width = _read(nvml, "nvmlDeviceGetCurrPcieLinkWidth", h)
        widest = _read(nvml, "nvmlDeviceGetMaxPcieLinkWidth", h)
        gen = _read(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", h)
        own = _read(nvml, "nvmlDeviceGetGpuMaxPcieLinkGeneration", h)
        if width is None or widest is None or gen is None:
            bad.append(f"GPU {i}: its PCIe link cannot be read")
            continue
        if width < widest:
            bad.append(f"GPU {i}: x{width} of x{widest} (trained down)")
        want = expect_gen or own
        if want and gen < want:
            bad.append(
                f"GPU {i}: gen {gen} where it runs gen {want} (the slot or a riser limits it)"
            )
    detail = "; ".join(bad) or f"{len(handles)} GPUs at full width" + (
        f", gen {expect_gen} or better" if expect_gen else ""
    )
    return compare(name, len(bad), 0, "GPUs", "<=", detail=detail, node=node)


def fabric_manager_check(
    expected: bool,
    node: str = "",
    switches: Callable[[], list[str]] = lambda: glob.glob(SWITCH_DEVICES),
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
    systemctl: str | None = None,
) -> Check:
    name = "fabric_manager"
    found = switches()
    if not expected and not found:
        return not_run(name, "no NVSwitch on this node", node=node)
    why = f"{len(found)} NVSwitch devices" if found else "the GPU model's nodes have NVSwitches"
    exe = systemctl or shutil.which("systemctl")
    if exe is None:
        return not_run(name, f"{why}, but no systemctl to ask", node=node)
    try:
        # is-active exits non-zero for every state but active: the state is in its output.
        done = run([exe, "is-active", "nvidia-fabricmanager"], capture_output=True, text=True,
                   timeout=30, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return failed(name, f"{why}; systemctl did not answer ({exc})", node=node)
    state = done.stdout.strip() or "unknown"
    detail = f"{why}; nvidia-fabricmanager is {state}"
    return compare(name, state, "active", "", "==", detail=detail, node=node)
