"""KVM or TCG: decided by really trying KVM, never by the existence of /dev/kvm.

On a host that is itself a VM, /dev/kvm can exist while QEMU aborts on it or the guest crawls.
The probe boots the guest kernel with no root disk under KVM; a working KVM reaches the kernel's
"unable to mount root" panic within seconds and QEMU exits (-no-reboot, panic=-1). The answer
is cached per host boot, since it cannot change until the host reboots.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

PROBE_TIMEOUT_S = 20.0
# A working KVM boots a kernel to the root-mount panic in 1-3 s; TCG takes far longer.
KVM_FAST_S = 8.0


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def probe_kvm(kernel: Path) -> tuple[bool, str]:
    """(works, why): boot `kernel` under KVM and see whether it panics on time."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is missing or not accessible"
    argv = [
        "qemu-system-x86_64", "-accel", "kvm", "-cpu", "host", "-m", "256",
        "-kernel", str(kernel), "-append", "console=ttyS0 panic=-1 root=/dev/nonexistent",
        "-no-reboot", "-display", "none", "-serial", "stdio", "-monitor", "none",
    ]  # fmt: skip
    start = time.monotonic()
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return False, f"a kernel under KVM did not boot within {PROBE_TIMEOUT_S:.0f} s"
    took = time.monotonic() - start
    if "Kernel panic" not in proc.stdout:
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return False, f"QEMU with KVM failed (exit {proc.returncode}): {err}"
    if took > KVM_FAST_S:
        return False, f"a kernel under KVM took {took:.1f} s to boot (too slow to be real KVM)"
    return True, f"a kernel under KVM booted in {took:.1f} s"


def choose_accel(kernel: Path, cache: Path) -> tuple[str, str]:
    """("kvm" | "tcg", why). RACKFORM_TESTBED_ACCEL=kvm|tcg overrides the probe."""
    forced = os.environ.get("RACKFORM_TESTBED_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced, "set by RACKFORM_TESTBED_ACCEL"
    memo = cache / "accel.json"
    boot = _boot_id()
    try:
        seen = json.loads(memo.read_text())
        if seen.get("boot_id") == boot:
            return seen["accel"], seen["why"] + " (cached for this host boot)"
    except (OSError, ValueError, KeyError):
        pass
    works, why = probe_kvm(kernel)
    accel = "kvm" if works else "tcg"
    memo.write_text(json.dumps({"boot_id": boot, "accel": accel, "why": why}))
    return accel, why
