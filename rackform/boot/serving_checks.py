"""What a serving (inference) node's validation checks: read-only, seconds, nothing written.

A serving node never runs the training smoke job, DCGM diagnostics or a storage write test
(they take its GPUs and disks from the traffic it serves). Its validation is:

- `gpu_count`: the GPUs `nvidia-smi` lists equal the node's (its instance type's or
  node group's `gpus_per_node`);
- `driver_branch`: every GPU runs a driver of the blueprint's branch;
- `ecc_uncorrectable`: no GPU counts a volatile uncorrectable ECC error;
- `row_remap`: no GPU has a row remap pending or failed (a pending one needs a GPU reset, a
  failed one a replacement: NVIDIA, "A100 GPU memory error management", user-visible
  statistics);
- `model_mount`: the blueprint's storage mount (where the model's weights live) is a mounted
  filesystem, not an empty directory on the root disk.

A joining node runs these itself at the end of its bootstrap (rackform/boot/node.py)
and completes its launch hook with ABANDON if one fails, so it never takes traffic; `up`'s
Validate stage runs the same script over every serving node (rackform/validation/cluster.py).

Standard library only, one file (it is copied to nodes as it is): `nvidia-smi` in CSV query
mode, the interface NVIDIA documents for scripts (`nvidia-smi --help-query-gpu`); a field a
GPU does not support reads `[N/A]` or `[Not Supported]` and counts as nothing to check, and a
field this nvidia-smi does not know fails its query, which reports the check as not run (never
passed). Prints the report (`{"checks": [...]}`, the validators' format) as JSON; exit 1 when a
check failed.

    python3 serving_checks.py --expect-gpus 4 --driver-branch 550 --mount /mnt/models
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable

Smi = Callable[[list[str]], str]  # nvidia-smi's stdout for these fields; raises RuntimeError
NOT_APPLICABLE = ("[n/a]", "n/a", "[not supported]", "not supported", "")


def check(name: str, status: str, measured, expected, unit: str = "", detail: str = "") -> dict:
    return {
        "name": name,
        "status": status,
        "measured": measured,
        "expected": expected,
        "unit": unit,
        "detail": detail,
    }


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


def _number(value: str) -> int | None:
    if value.lower() in NOT_APPLICABLE:
        return None
    if value.lower() in ("yes", "no"):
        return int(value.lower() == "yes")
    return int(float(value))


def gpu_checks(smi: Smi, expect_gpus: int, branch: str) -> list[dict]:
    names = ("gpu_count", "driver_branch", "ecc_uncorrectable", "row_remap")
    try:
        gpus = rows(smi, ["index", "driver_version"])
    except RuntimeError as exc:
        if expect_gpus:
            return [check(names[0], "fail", None, expect_gpus, "GPUs", str(exc))] + [
                check(n, "not-run", None, None, "", f"no GPU to read: {exc}") for n in names[1:]
            ]
        return [check(n, "not-run", None, None, "", f"no GPUs expected ({exc})") for n in names]
    count = "pass" if len(gpus) == expect_gpus else "fail"
    out = [check("gpu_count", count, len(gpus), expect_gpus, "GPUs", "GPUs nvidia-smi lists")]
    want = branch.split("-")[0]
    others = sorted(
        {g["driver_version"] for g in gpus if not g["driver_version"].startswith(f"{want}.")}
    )
    out.append(
        check(
            "driver_branch",
            "fail" if others or not gpus else "pass",
            ", ".join(others) or (gpus[0]["driver_version"] if gpus else None),
            want,
            "",
            f"drivers of another branch: {', '.join(others)}" if others else "",
        )
    )
    out.append(_counted(smi, "ecc_uncorrectable", ["ecc.errors.uncorrected.volatile.total"]))
    out.append(_counted(smi, "row_remap", ["remapped_rows.pending", "remapped_rows.failure"]))
    return out


def _counted(smi: Smi, name: str, fields: list[str]) -> dict:
    """GPUs with a non-zero value in any of `fields`; not run when no GPU reports them."""
    try:
        found = rows(smi, ["index", *fields])
    except RuntimeError as exc:
        return check(name, "not-run", None, 0, "GPUs", f"not readable: {exc}")
    values = {g["index"]: [_number(g.get(f, "")) for f in fields] for g in found}
    read = {i: v for i, v in values.items() if any(x is not None for x in v)}
    if not read:
        return check(name, "not-run", None, 0, "GPUs", f"no GPU reports {', '.join(fields)}")
    bad = sorted(i for i, v in read.items() if any(x for x in v if x is not None))
    detail = f"GPU {', '.join(bad)}: {', '.join(fields)}" if bad else f"{len(read)} GPUs read"
    return check(name, "fail" if bad else "pass", len(bad), 0, "GPUs", detail)


def mount_check(mount: str, ismount: Callable[[str], bool] = os.path.ismount) -> dict:
    if not mount:
        return check("model_mount", "not-run", None, None, "", "no storage mount declared")
    if ismount(mount):
        return check("model_mount", "pass", "mount point", "mount point", "", mount)
    what = "missing" if not os.path.isdir(mount) else "not mounted"
    return check("model_mount", "fail", what, "mount point", "", f"{mount} is {what}")


def serving_checks(expect_gpus: int, branch: str, mount: str, smi: Smi = nvidia_smi) -> list:
    return [*gpu_checks(smi, expect_gpus, branch), mount_check(mount)]


def failed(checks: list[dict]) -> list[dict]:
    return [c for c in checks if c["status"] == "fail"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="serving_checks", description=__doc__.splitlines()[0])
    p.add_argument("--expect-gpus", type=int, default=0)
    p.add_argument("--driver-branch", default="")
    p.add_argument("--mount", default="")
    args = p.parse_args(argv)
    checks = serving_checks(args.expect_gpus, args.driver_branch, args.mount)
    print(json.dumps({"checks": checks}, indent=1))
    return 1 if failed(checks) else 0


if __name__ == "__main__":
    sys.exit(main())
