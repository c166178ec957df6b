"""What a serving (inference) node's validation checks: read-only, seconds, nothing written.

A serving node never runs the training smoke job, DCGM diagnostics or a storage write test
(they take its GPUs and disks from the traffic it serves). Its validation is:

- `gpu_count`: the GPUs `nvidia-smi` lists equal the node's (its instance type's or
  node group's `gpus_per_node`);
- `driver_branch`: every GPU runs a driver of the blueprint's branch;
- `ecc_uncorrectable`, `row_remap`: no GPU counts a volatile uncorrectable ECC error, none has a
  row remap pending or failed, judged as the host checks judge them (validators/gpu_memory.py);
- `model_mount`: the blueprint's storage mount (where the model's weights live) is a mounted
  filesystem, not an empty directory on the root disk (validators/hostcheck.py's mount table).

A joining node runs these itself at the end of its bootstrap, from the validators its boot
artifact carries (rackform/boot/node.py), and completes its launch hook with ABANDON if one
fails, so it never takes traffic; `up`'s Validate stage runs the same module over every serving
node (rackform/acceptance/cluster.py).

The GPUs are read through `nvidia-smi` in CSV query mode, the interface NVIDIA documents for
scripts (`nvidia-smi --help-query-gpu`), not NVML: nvidia-ml-py (pynvml) is not on a fresh node,
whose Python has the standard library only (so has this module). A field a GPU does not support
reads `[N/A]` or `[Not Supported]` and counts as nothing to check; a field this nvidia-smi does
not know fails its query, which reports the check as not run (never passed). Prints the report
(validators/report.py's document) as JSON; exit 1 when a check failed.

    python3 -m validators.serving --expect-gpus 4 --driver-branch 550 --mount /mnt/models
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Callable

from validators import gpu_memory, report
from validators.hostcheck import not_mounted, unreadable
from validators.report import Check, compare, failed, not_run

Smi = Callable[[list[str]], str]  # nvidia-smi's stdout for these fields; raises RuntimeError
NOT_APPLICABLE = ("[n/a]", "n/a", "[not supported]", "not supported", "")
CHECKS = ("gpu_count", "driver_branch", "ecc_uncorrectable", "row_remap", "model_mount")


def nvidia_smi(fields: list[str]) -> str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise RuntimeError("nvidia-smi is not installed (no NVIDIA driver)")
    argv = [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise RuntimeError(f"nvidia-smi exited {done.returncode}: {last}")
    return done.stdout


def rows(smi: Smi, fields: list[str]) -> list[dict[str, str]]:
    out = []
    for line in smi(fields).splitlines():
        if line.strip():
            values = [v.strip() for v in line.split(",")]
            out.append(dict(zip(fields, values, strict=False)))
    return out


def _number(value: str) -> int | str | None:
    """A field's value as a number (Yes/No as 1/0); None where the GPU does not report it, the
    value itself where it is no number (`[Unknown Error]`: the GPU could not be read)."""
    if value.lower() in NOT_APPLICABLE:
        return None
    if value.lower() in ("yes", "no"):
        return int(value.lower() == "yes")
    try:
        return int(float(value))
    except ValueError:
        return value


def gpu_checks(smi: Smi, expect_gpus: int, branch: str) -> list[Check]:
    names = CHECKS[:4]
    try:
        gpus = rows(smi, ["index", "driver_version"])
    except RuntimeError as exc:
        return unreadable(names, expect_gpus, str(exc), "nvidia-smi")
    out = [
        compare("gpu_count", len(gpus), expect_gpus, "GPUs", "==", detail="GPUs nvidia-smi lists")
    ]
    out.append(driver_check([g["driver_version"] for g in gpus], branch))
    out.append(_ecc(smi))
    out.append(_remap(smi))
    return out


def driver_check(versions: list[str], branch: str) -> Check:
    """Every GPU on a driver of `branch` (550-open: 550)."""
    want = branch.split("-")[0]
    if not versions:
        return failed("driver_branch", "nvidia-smi lists no GPU", expected=want)
    others = sorted({v for v in versions if not v.startswith(f"{want}.")})
    if others:
        why = f"drivers of another branch: {', '.join(others)}"
        return failed("driver_branch", why, measured=", ".join(others), expected=want)
    return Check("driver_branch", report.PASS, versions[0], want)


def _ecc(smi: Smi) -> Check:
    field = "ecc.errors.uncorrected.volatile.total"
    try:
        found = rows(smi, ["index", field])
    except RuntimeError as exc:
        return not_run("ecc_uncorrectable", f"not readable: {exc}", expected=0, unit="errors")
    counts = {g["index"]: _number(g.get(field, "")) for g in found}
    return gpu_memory.ecc_check(counts, "nvidia-smi")


def _remap(smi: Smi) -> Check:
    fields = ["remapped_rows.pending", "remapped_rows.failure"]
    try:
        found = rows(smi, ["index", *fields])
    except RuntimeError as exc:
        return not_run("row_remap", f"not readable: {exc}", expected=0, unit="GPUs")
    states: dict[str, gpu_memory.Remap] = {}
    for g in found:
        pending, failure = (_number(g.get(f, "")) for f in fields)
        if pending is None and failure is None:
            states[g["index"]] = None
        elif isinstance(pending, str) or isinstance(failure, str):
            states[g["index"]] = f"{', '.join(fields)}: {g.get(fields[0])}, {g.get(fields[1])}"
        else:
            states[g["index"]] = (bool(pending), bool(failure))
    return gpu_memory.remap_check(states, "nvidia-smi")


def mount_check(mount: str) -> Check:
    if not mount:
        return not_run("model_mount", "no storage mount declared")
    unmounted = not_mounted("model_mount", mount)
    if unmounted is not None:
        return unmounted
    return Check("model_mount", report.PASS, "mount point", "mount point", "", "==", mount)


def serving_checks(expect_gpus: int, branch: str, mount: str, smi: Smi = nvidia_smi) -> list:
    return [*gpu_checks(smi, expect_gpus, branch), mount_check(mount)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="validators.serving", description=__doc__.splitlines()[0])
    p.add_argument("--expect-gpus", type=int, default=0)
    p.add_argument("--driver-branch", default="")
    p.add_argument("--mount", default="")
    args = p.parse_args(argv)
    doc = report.make(serving_checks(args.expect_gpus, args.driver_branch, args.mount))
    print(report.dumps(doc))
    return report.exit_code(doc)


if __name__ == "__main__":
    sys.exit(main())
