"""Host checks, run once per node before the smoke job:

    python -m validators.hostcheck --json host.json --expect-gpus 8 --storage-dir /mnt/checkpoints

- through NVML (nvidia-ml-py, where importable): GPU count, uncorrectable ECC errors, pending
  or failed row remaps, every NVLink up and each PCIe link at full width and generation, and
  the NVSwitch fabric manager running where the node has NVSwitches (see link_checks.py);
- `dcgmi diag` at the configured level, where DCGM is installed;
- the storage ceiling of the checkpoint mount (see storage.py);
- with `--shared-mount`, the shared tier: mounted, read at the rate the GPUs consume, and the
  same file system on every node of the run (see shared_checks.py);
- with `--imex-members` (a tray of a rack-scale NVLink domain: its domain's addresses), every
  GPU registered with the NVLink fabric (`nvidia-smi -q`) and IMEX's domain up
  (`nvidia-imex-ctl -N`); see nvlink_domain.py.

Standard library only, plus pynvml when present. Exit 0 when no check failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys

from validators import gpu_memory, link_checks, nvlink_domain, report, shared_checks, storage
from validators.report import Check, compare, failed, not_run

# dcgmi diag levels and how long each may take before it counts as hung (DOMAIN: r1 seconds,
# r2 about 2 minutes, r3 about 15 minutes).
DCGM_TIMEOUT_S = {1: 300, 2: 900, 3: 3600}


def nvml_checks(
    nvml,
    expect_gpus: int | None,
    node: str = "",
    expect_nvlinks: int | None = None,
    expect_pcie_gen: int | None = None,
) -> list[Check]:
    """`nvml` is the pynvml module (or None when it cannot be imported). NVML sees every GPU
    the driver knows, whatever CUDA_VISIBLE_DEVICES says."""
    names = ("nvml_gpu_count", "ecc_uncorrectable", "row_remap", "nvlink_up", "pcie_link")
    if nvml is None:
        return unreadable(
            names, expect_gpus, "nvidia-ml-py (pynvml) is not installed", "NVML", node
        )
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return unreadable(names, expect_gpus, f"NVML unavailable: {exc}", "NVML", node)
    try:
        n = nvml.nvmlDeviceGetCount()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        out = [
            compare(
                "nvml_gpu_count",
                n,
                expect_gpus,
                "GPUs",
                "==",
                node=node,
                detail="GPUs the driver sees",
                no_threshold="no expected GPU count given",
            )
        ]
        out.append(_ecc(nvml, handles, node))
        out.append(_remap(nvml, handles, node))
        out.append(link_checks.nvlink_check(nvml, handles, expect_nvlinks, node))
        out.append(link_checks.pcie_check(nvml, handles, expect_pcie_gen, node))
        return out
    finally:
        nvml.nvmlShutdown()


def unreadable(
    names: tuple[str, ...], expect_gpus: int | None, why: str, reader: str, node: str = ""
) -> list[Check]:
    """The checks `names` (the GPU count first) where nothing can read the GPUs (`reader`, NVML
    or nvidia-smi, is absent or answers nothing: `why`)."""
    if expect_gpus:
        # GPUs are expected, so no driver to ask is itself the failure.
        return [
            failed(
                names[0],
                f"{why}; is the NVIDIA driver installed?",
                expected=expect_gpus,
                unit="GPUs",
                op="==",
                node=node,
            )
        ] + [not_run(n, f"{reader} unavailable", node=node) for n in names[1:]]
    return [not_run(n, f"{why} (no GPUs expected)", node=node) for n in names]


def _ecc(nvml, handles, node: str) -> Check:
    """Each GPU's volatile uncorrectable ECC errors, judged by gpu_memory.ecc_check."""
    counts: dict[int, gpu_memory.Count] = {}
    for i, h in enumerate(handles):
        try:
            counts[i] = nvml.nvmlDeviceGetTotalEccErrors(
                h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            )
        except nvml.NVMLError_NotSupported:
            counts[i] = None
        except nvml.NVMLError as exc:  # a GPU fallen off the bus, ...
            counts[i] = str(exc or type(exc).__name__)
    return gpu_memory.ecc_check(counts, "NVML", node)


def _remap(nvml, handles, node: str) -> Check:
    """Each GPU's pending and failed row remaps, judged by gpu_memory.remap_check."""
    states: dict[int, gpu_memory.Remap] = {}
    for i, h in enumerate(handles):
        try:
            _corr, _unc, pending, failure = nvml.nvmlDeviceGetRemappedRows(h)
        except nvml.NVMLError_NotSupported:
            states[i] = None
        except nvml.NVMLError as exc:
            states[i] = str(exc or type(exc).__name__)
        else:
            states[i] = (bool(pending), bool(failure))
    return gpu_memory.remap_check(states, "NVML", node)


def dcgm_check(level: int, node: str = "", exe: str = "dcgmi") -> Check:
    name, expected = "dcgm_diag", f"no failures at r{level}"
    path = shutil.which(exe)
    if path is None:
        return not_run(name, "dcgmi is not installed", expected=expected, node=node)
    cmd = [path, "diag", "-r", str(level), "-j"]
    try:
        p = subprocess.run(
            cmd, capture_output=True, text=True, timeout=DCGM_TIMEOUT_S[level], check=False
        )
    except subprocess.TimeoutExpired:
        return failed(
            name,
            f"dcgmi diag -r {level} did not finish in {DCGM_TIMEOUT_S[level]} s",
            expected=expected,
            node=node,
        )
    results = parse_diag(p.stdout)
    if results is None:
        last = (p.stderr.strip() or p.stdout.strip() or "no output").splitlines()[-1]
        return failed(
            name,
            f"dcgmi diag exited {p.returncode} without results: {last}",
            expected=expected,
            node=node,
        )
    return diag_verdict(results, expected, node, rc=p.returncode)


_STATUS = {
    "pass": "pass",
    "fail": "fail",
    "warn": "warn",
    "warning": "warn",
    "skip": "skip",
    "skipped": "skip",
    "not run": "skip",
    "notrun": "skip",
}


def parse_diag(text: str) -> list[tuple[str, str, str]] | None:
    """(test, status, message) per test result, from either JSON shape dcgmi writes (DCGM 3.x
    nests tests in categories under "DCGM GPU Diagnostic", 4.x under "DCGM Diagnostic" or at
    the top). A status word not known here reads as "unknown", never as a pass."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        doc = json.loads(text[start:])
    except ValueError:
        return None
    out: list[tuple[str, str, str]] = []

    def walk(v):
        if isinstance(v, dict):
            if "name" in v and isinstance(v.get("results"), list):
                for r in v["results"]:
                    if isinstance(r, dict):
                        word = str(r.get("status", "")).strip().lower()
                        msgs = [
                            w.get("warning", "")
                            for w in r.get("warnings", [])
                            if isinstance(w, dict)
                        ]
                        out.append((str(v["name"]), _STATUS.get(word, "unknown"), "; ".join(msgs)))
                return
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(doc)
    return out or None


def diag_verdict(
    results: list[tuple[str, str, str]], expected: str, node: str = "", rc: int = 0
) -> Check:
    """A pass needs at least one test passed, none failed or unrecognised, and dcgmi's own
    exit status 0 (a non-zero one is dcgmi saying something went wrong, whatever it listed)."""
    fails = [(t, m) for t, s, m in results if s == "fail"]
    unknown = sorted({t for t, s, _msg in results if s == "unknown"})
    passed = sum(s == "pass" for _test, s, _msg in results)
    measured = f"{passed} pass, {len(fails)} fail, {len(results) - passed - len(fails)} other"
    if fails:
        why = "; ".join(f"{t}: {m}" if m else t for t, m in fails[:5])
        return failed("dcgm_diag", why, measured=measured, expected=expected, op="==", node=node)
    if rc != 0:
        return failed(
            "dcgm_diag",
            f"dcgmi diag exited {rc} although no test it listed failed",
            measured=measured,
            expected=expected,
            op="==",
            node=node,
        )
    if unknown:
        return failed(
            "dcgm_diag",
            f"unrecognised status for {', '.join(unknown)}",
            measured=measured,
            expected=expected,
            op="==",
            node=node,
        )
    if not passed:
        return not_run(
            "dcgm_diag",
            "dcgmi ran but passed no test (all skipped)",
            measured=measured,
            expected=expected,
            node=node,
        )
    warns = [t for t, s, _msg in results if s == "warn"]
    detail = f"warnings: {', '.join(sorted(set(warns)))}" if warns else ""
    return Check("dcgm_diag", report.PASS, measured, expected, "", "==", detail, node)


def storage_check(
    directory: str | None, total_mb: int, minimum: float | None, node: str = ""
) -> Check:
    name, unit = "storage_write_ceiling", "GB/s"
    if not directory:
        return not_run(name, "no checkpoint directory given", unit=unit, node=node)
    if total_mb <= 0:
        return not_run(name, "storage probe disabled (--storage-probe-mb 0)", unit=unit, node=node)
    c = storage.measure(directory, total_mb)
    if c.gbps is None:
        return failed(
            name, c.error or "nothing measured", expected=minimum, unit=unit, op=">=", node=node
        )
    return compare(
        name,
        round(c.gbps, 3),
        minimum,
        unit,
        detail=c.method,
        node=node,
        no_threshold="no declared array write speed (storage.checkpoint.write_gbps)",
    )


def is_mount_point(directory: str, mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether `directory` is where a filesystem is mounted. The mount table is read first:
    os.path.ismount compares devices and inodes, and so misses a bind mount from the same
    filesystem (a checkpoint path bound from the array's own mount, say)."""
    real = os.path.realpath(directory)
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split(" ")
                # Field 5 is the mount point, with space, tab, newline and \\ escaped in octal.
                if len(fields) > 4 and _unescape(fields[4]) == real:
                    return True
    except OSError:
        pass
    return os.path.ismount(real)


def _mount_entry(directory: str, mountinfo: str) -> tuple[list[str], list[str]] | None:
    """The mount table's line for `directory` (the last mount there wins): its fields before
    the " - " separator and after, or None where nothing is mounted there."""
    real, found = os.path.realpath(directory), None
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                head, _sep, tail = line.partition(" - ")
                fields = head.split(" ")
                if len(fields) > 5 and _unescape(fields[4]) == real and len(tail.split()) > 2:
                    found = (fields, tail.split())
    except OSError:
        pass
    return found


def mount_source(directory: str, mountinfo: str = "/proc/self/mountinfo") -> str:
    """The device mounted at `directory` (the last mount there wins), or "" if none is."""
    entry = _mount_entry(directory, mountinfo)
    return _unescape(entry[1][1]) if entry else ""


def read_only(directory: str, mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether the mount at `directory` takes no writes: read-only as mounted, or its
    filesystem remounted read-only (ext4's errors=remount-ro after an I/O error)."""
    entry = _mount_entry(directory, mountinfo)
    if entry is None:
        return False
    mount_opts, super_opts = entry[0][5].split(","), entry[1][2].split(",")
    return "ro" in mount_opts or "ro" in super_opts


def md_health(device: str, sys_root: str = "/sys") -> str:
    """What is wrong with the md array `device` ("" when it is healthy or not an md array):
    md(4) calls a RAID0 with a member gone `broken`, marks a failed member's state `faulty`,
    and counts the members a redundant array misses in `degraded`."""
    name = os.path.basename(os.path.realpath(device)) if device else ""
    md = os.path.join(sys_root, "block", name, "md")
    if not name.startswith("md") or not os.path.isdir(md):
        return ""
    problems = []
    state = _sysfs(os.path.join(md, "array_state"))
    if state in ("broken", "inactive", "clear", "suspended"):
        problems.append(f"array state {state}")
    faulty = [
        "/dev/" + e.removeprefix("dev-")
        for e in sorted(os.listdir(md))
        if e.startswith("dev-") and "faulty" in _sysfs(os.path.join(md, e, "state")).split(",")
    ]
    if faulty:
        problems.append(f"failed member(s) {', '.join(faulty)}")
    missing = _sysfs(os.path.join(md, "degraded"))
    if missing.isdigit() and int(missing) > 0:
        problems.append(f"degraded: {missing} member(s) missing")
    return f"/dev/{name}: {'; '.join(problems)}" if problems else ""


def _sysfs(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def not_mounted(name: str, directory: str, node: str = "") -> Check | None:
    """`name` failed where `directory` does not exist or nothing is mounted there (the mount
    table says: is_mount_point); None where a filesystem is mounted there."""
    if not os.path.isdir(directory):
        return failed(
            name,
            f"{directory} does not exist",
            measured="missing",
            expected="mount point",
            op="==",
            node=node,
        )
    if not is_mount_point(directory):
        return failed(
            name,
            f"{directory} is a plain directory, not a mounted filesystem",
            measured="not mounted",
            expected="mount point",
            op="==",
            node=node,
        )
    return None


def mount_check(directory: str | None, node: str = "") -> Check:
    """The checkpoint directory must be the array's mount point: an empty mount point left
    unmounted would put checkpoints on the root disk and still accept every write."""
    name = "checkpoint_mount"
    if not directory:
        return not_run(name, "no checkpoint mount declared", node=node)
    unmounted = not_mounted(name, directory, node)
    if unmounted is not None:
        return unmounted
    if read_only(directory):
        return failed(
            name,
            f"{directory} is mounted read-only: no checkpoint can be written there (a filesystem"
            " remounted read-only after an I/O error: read the kernel log, repair, remount)",
            measured="read-only",
            expected="mount point",
            op="==",
            node=node,
        )
    # A mounted array that lost a member still answers some reads: the mount alone is no proof.
    sick = md_health(mount_source(directory))
    if sick:
        return failed(
            name,
            f"{directory} is on an md array that is not healthy ({sick}); checkpoints written "
            "there are at risk: replace the drive (nvme_raid says how)",
            measured="unhealthy array",
            expected="mount point",
            op="==",
            node=node,
        )
    return Check(name, report.PASS, "mount point", "mount point", "", "==", directory, node)


def shared_checks_for(args: argparse.Namespace) -> list[Check]:
    """The shared tier's checks: its mount first; reads and the peers' files only on a mount
    (an unmounted directory would measure the root disk and share nothing)."""
    mount, node = args.shared_mount, args.node
    if not mount:
        return []
    names = ("shared_mount", "shared_read", "shared_visible")
    if not os.path.isdir(mount) or not is_mount_point(mount):
        what = "does not exist" if not os.path.isdir(mount) else "is a plain directory, not mounted"
        first = failed(
            names[0], f"{mount} {what}: the shared tier is not there",
            measured="not mounted", expected="mount point", op="==", node=node,
        )  # fmt: skip
        return [first, *(not_run(n, f"{mount} is not mounted", node=node) for n in names[1:])]
    source = mount_source(mount)
    mounted = Check(names[0], report.PASS, "mount point", "mount point", "", "==", source, node)
    peers = [p for p in (args.shared_peers or "").split(",") if p]
    # The peers' files first: every node starts its checks at about the same time, and a read
    # bounded at a minute would otherwise eat into the wait for the others.
    visible = shared_checks.visible_check(mount, args.shared_run, node, peers, args.shared_wait_s)
    read = shared_checks.read_check(
        mount, args.shared_read_dir, args.shared_read_mb, args.shared_read_min_gbps,
        args.shared_read_timeout_s, node,
    )  # fmt: skip
    return [mounted, read, visible]


def _output(argv: list[str], run=subprocess.run) -> tuple[str | None, str]:
    """What `argv` printed, or None with why it could not be read (not installed, a non-zero
    exit, no answer within 30 s)."""
    exe = shutil.which(argv[0])
    if exe is None:
        return None, f"{argv[0]} is not installed"
    try:
        p = run([exe, *argv[1:]], capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return None, f"{' '.join(argv)} did not answer in 30 s"
    if p.returncode != 0:
        last = (p.stderr.strip() or p.stdout.strip() or "no output").splitlines()[-1]
        return None, f"{' '.join(argv)} exited {p.returncode}: {last}"
    return p.stdout, ""


def nvlink_domain_checks(
    members: list[str], node: str = "", expect_gpus: int | None = None, run=subprocess.run
) -> list[Check]:
    """A rack-scale tray's fabric registration and its IMEX domain (nvlink_domain.py); none
    where the node is no tray of such a domain (`members` empty)."""
    if not members:
        return []
    smi, why = _output(["nvidia-smi", "-q"], run)
    if smi is None:
        fabric = failed("gpu_fabric", why, expected="every GPU registered", node=node)
    else:
        fabric = nvlink_domain.fabric_check(nvlink_domain.parse_fabric(smi), node, expect_gpus)
    ctl, why = _output(["nvidia-imex-ctl", "-N"], run)
    return [fabric, nvlink_domain.imex_check(ctl, members, node, why)]


def _import_nvml():
    try:
        import pynvml  # nvidia-ml-py; optional
    except ImportError:
        return None
    return pynvml


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="validators.hostcheck",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", help="Write the JSON report here.")
    p.add_argument("--expect-gpus", type=int, help="GPUs this node should have.")
    p.add_argument("--expect-nvlinks", type=int, help="NVLinks up on each GPU (the model's).")
    p.add_argument("--expect-pcie-gen", type=int, help="PCIe generation each GPU runs at.")
    p.add_argument(
        "--expect-fabric-manager", action="store_true", help="The node's GPUs use NVSwitches."
    )
    p.add_argument("--dcgm-level", type=int, choices=(1, 2, 3), default=1)
    p.add_argument("--storage-dir", help="The checkpoint mount to probe.")
    p.add_argument("--storage-probe-mb", type=int, default=4096, help="MiB to write (0: skip).")
    p.add_argument("--storage-min-gbps", type=float, help="Floor for the storage ceiling.")
    p.add_argument("--expect-mount", help="This directory must be a mount point (the array).")
    p.add_argument("--node", default="", help="Name to show per check (default: none).")
    p.add_argument("--shared-mount", help="The shared tier's mount point (storage.shared).")
    p.add_argument("--shared-read-dir", help="Its datasets directory, read for the read check.")
    p.add_argument("--shared-read-mb", type=int, default=1024, help="MiB to read (0: skip).")
    p.add_argument("--shared-read-min-gbps", type=float, help="What the node's GPUs consume.")
    p.add_argument("--shared-read-timeout-s", type=float, default=60.0, help="Read for at most.")
    p.add_argument("--shared-run", default="", help="The run's id (the peers' files are its).")
    p.add_argument("--shared-peers", default="", help="Every node of the run, comma-separated.")
    p.add_argument("--shared-wait-s", type=float, default=120.0, help="Wait this long for peers.")
    p.add_argument(
        "--imex-members",
        default="",
        help="A rack-scale tray: its NVLink domain's addresses, comma-separated (fabric, IMEX).",
    )
    p.add_argument("--no-table", action="store_true", help="Do not print the table.")
    p.add_argument(
        "--quick",
        action="store_true",
        help="Only what takes seconds (NVML, the fabric manager, the mount): Slurm's health check"
        " between jobs; no DCGM diagnostic, no storage probe, no read of the shared tier.",
    )
    args = p.parse_args(argv)
    node = args.node
    checks = nvml_checks(
        _import_nvml(), args.expect_gpus, node, args.expect_nvlinks, args.expect_pcie_gen
    )
    checks.append(link_checks.fabric_manager_check(args.expect_fabric_manager, node))
    members = [a.strip() for a in args.imex_members.split(",") if a.strip()]
    checks += nvlink_domain_checks(members, node, args.expect_gpus)
    if args.quick:
        checks.append(mount_check(args.expect_mount, node))
        return _finish(args, checks)
    checks.append(dcgm_check(args.dcgm_level, node))
    checks.append(mount_check(args.expect_mount, node))
    checks.append(
        storage_check(args.storage_dir, args.storage_probe_mb, args.storage_min_gbps, node)
    )
    checks += shared_checks_for(args)
    return _finish(args, checks)


def _finish(args: argparse.Namespace, checks: list[Check]) -> int:
    doc = report.make(checks, complete=True, host={"hostname": socket.gethostname()})
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(report.dumps(doc))
    if not args.no_table:
        print(report.table(doc), flush=True)
    return report.exit_code(doc)


if __name__ == "__main__":
    sys.exit(main())
