"""A Debian 13 root holding Slurm 24.11, for the scheduler tests that need what Debian 12's
Slurm 22.05 lacks: the topology/block plugin (Slurm 23.11 and later) and jobs' `--segment`.

Built once with debootstrap (minbase, with slurmctld, slurmd and the clients and what they
depend on) into rackform's cache beside the testbed's images (`image.cache_dir()`), in a
directory named by the hash of its recipe, so a changed recipe builds a new root and drops the
old one (`image.cached_build`). A root, not a VM: the tests run the root's own slurmctld and
slurmd on this machine's kernel and loopback (tests/slurm_block_local.py), which costs a
debootstrap, not a boot, and needs no Debian 13 among the roles' supported systems.

Standard library only, like the rest of the testbed's image code. Building needs root
(debootstrap, and the tests' mounts need it too) and Debian's archive (deb.debian.org, or
$RACKFORM_TESTBED_MIRROR).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from rackform.testbed.image import MIRROR, ImageError, cached_build, debootstrap_build

SUITE = "trixie"  # Debian 13: Slurm 24.11 (Debian 12's bookworm has 22.05, no topology/block)
# minbase skips Recommends; Slurm's daemons and clients bring their libraries and plugins
# (slurm-wlm-basic-plugins) as dependencies.
PACKAGES = ("slurmctld", "slurmd", "slurm-client")
# Slurm's daemons resolve SlurmctldHost and NodeHostname; debootstrap leaves /etc/hosts empty.
_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def recipe() -> dict:
    """Everything that decides the root's content; its hash names the cached root."""
    return {"suite": SUITE, "mirror": MIRROR, "packages": sorted(PACKAGES), "hosts": _HOSTS}


def recipe_key() -> str:
    return hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()[:16]


def ensure_root(log: Callable[[str], None] = print) -> tuple[Path, float | None]:
    """The root's directory (`<cache>/slurm-trixie-<key>/root`), built first if the cache has
    none for this recipe, and the seconds spent building it now (None: it was cached)."""
    d, built_s = cached_build(f"slurm-{SUITE}", recipe_key(), lambda final: _build(final, log))
    return d / "root", built_s


def slurm_version(root: Path) -> str:
    """The Debian version of the root's slurmctld package, from dpkg's own record."""
    status = (root / "var/lib/dpkg/status").read_text(errors="replace")
    for para in status.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in para.splitlines() if ": " in line and line[0] != " "
        )
        if fields.get("Package") == "slurmctld":
            return fields.get("Version", "")
    return ""


def _check_tools() -> None:
    if os.geteuid() != 0:
        raise ImageError("building the Slurm 24.11 root needs root (debootstrap)")
    if shutil.which("debootstrap") is None:
        raise ImageError("missing debootstrap; run `bash scripts/setup.sh --test` to install it")


def _build(final: Path, log: Callable[[str], None]) -> None:
    _check_tools()
    t0 = time.monotonic()
    log(f"testbed: building the Slurm root with debootstrap ({SUITE}: {', '.join(PACKAGES)})")

    def finish(work: Path, root: Path) -> None:
        (root / "etc/hosts").write_text(_HOSTS)
        for deb in (root / "var/cache/apt/archives").glob("*.deb"):
            deb.unlink()
        version = slurm_version(root)
        if not version:
            raise ImageError("debootstrap's root has no slurmctld package")
        log(f"testbed: Slurm root ready in {time.monotonic() - t0:.0f} s (slurmctld {version})")

    debootstrap_build(final, SUITE, PACKAGES, recipe(), finish)
