"""A GPU's memory errors, judged alike however they were read: through NVML by the host checks
(validators/hostcheck.py) or through `nvidia-smi` by the serving checks (validators/serving.py).

- `ecc_uncorrectable`: volatile (since the driver loaded) uncorrectable ECC errors;
- `row_remap`: row remapping (Ampere and later): a pending remap needs a GPU reset, a failed one
  a replacement (NVIDIA, "A100 GPU memory error management", user-visible statistics).

Each takes one reading per GPU: its value, None where the GPU does not report it, or a string
saying why it could not be read (a GPU fallen off the bus...), which fails the node. A pass needs
at least one GPU read. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping

from validators.report import Check, compare, failed, not_run

# A GPU's ECC error count; None: not supported; a string: why it could not be read.
Count = int | str | None
# A GPU's (remap pending, remap failed); None: not supported; a string: why it could not be read.
Remap = tuple[bool, bool] | str | None


def ecc_check(counts: Mapping[object, Count], source: str, node: str = "") -> Check:
    """Any uncorrectable error fails the node, as does a GPU whose counter cannot be read.
    `source`: what read the GPUs (NVML, nvidia-smi), named when it saw none."""
    total, bad, unsupported, read = 0, [], 0, 0
    for gpu, n in counts.items():
        if n is None:
            unsupported += 1
        elif isinstance(n, str):
            bad.append(f"GPU {gpu}: unreadable ({n})")
        else:
            read += 1
            total += n
            if n:
                bad.append(f"GPU {gpu}: {n}")
    if not counts:
        return not_run("ecc_uncorrectable", f"{source} sees no GPU to read", node=node)
    if unsupported == len(counts):
        return not_run(
            "ecc_uncorrectable", "ECC is not supported or not enabled on these GPUs", node=node
        )
    detail = "; ".join(bad) or f"{read} GPUs read"
    if read + unsupported < len(counts):  # some GPU could not be read: no clean bill
        return failed(
            "ecc_uncorrectable",
            detail,
            measured=total,
            expected=0,
            unit="errors",
            op="<=",
            node=node,
        )
    return compare("ecc_uncorrectable", total, 0, "errors", "<=", detail=detail, node=node)


def remap_check(states: Mapping[object, Remap], source: str, node: str = "") -> Check:
    """A GPU with a remap pending or failed fails the node, as does one whose state cannot be
    read."""
    bad, unsupported = [], 0
    for gpu, state in states.items():
        if state is None:
            unsupported += 1
        elif isinstance(state, str):
            bad.append(f"GPU {gpu}: unreadable ({state})")
        elif state[1]:
            bad.append(f"GPU {gpu}: remap failed")
        elif state[0]:
            bad.append(f"GPU {gpu}: remap pending (reset the GPU)")
    if not states:
        return not_run("row_remap", f"{source} sees no GPU to read", node=node)
    if unsupported == len(states):
        return not_run("row_remap", "row remapping is not supported on these GPUs", node=node)
    detail = "; ".join(bad) or f"{len(states) - unsupported} GPUs read"
    return compare("row_remap", len(bad), 0, "GPUs", "<=", detail=detail, node=node)
