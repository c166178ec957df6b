"""Debian roots holding a newer Slurm than Debian 12's 22.05, for the scheduler tests that need
what it lacks: Debian 13's (trixie) Slurm 24.11 for the topology/block plugin (Slurm 23.11 and
later) and jobs' `--segment`, and Debian forky's Slurm 26.05 for topology.yaml (Slurm 25.05 and
later: a block and a tree topology at once, each partition naming its own).

One recipe per suite (`SUITES`: the suite, the Slurm it carries; the packages and /etc/hosts are
the same for each), each root built once with debootstrap (minbase, with slurmctld, slurmd and
the clients and what they depend on) into rackform's cache beside the testbed's images
(`image.cache_dir()`), in a directory named by the suite and the hash of its recipe, so a changed
recipe builds a new root and drops that suite's old one (`image.cached_build`). A root, not a
VM: the tests run the root's own slurmctld and slurmd on this machine's kernel and loopback
(tests/slurm_block_local.py), which costs a debootstrap, not a boot, and needs no newer Debian
among the roles' supported systems.

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

# Each suite a root is built from, with the Slurm its archive carries (what the tests need it
# for: Debian 12's bookworm has 22.05, no topology/block and no topology.yaml). forky is Debian's
# testing suite: its Slurm moves with it (26.05.5 in forky's Packages, read 2026-12-05:
# http://deb.debian.org/debian/dists/forky/main/binary-amd64/Packages.xz).
# The script: debootstrap's for the suite where older debootstraps lack one of its name (Debian
# 12's 1.0.128 has no `forky`; every Debian suite's script there is a link to `sid`).
SUITES = {"trixie": ("24.11", ""), "forky": ("26.05", "sid")}
SUITE = "trixie"  # the default: Debian 13, Slurm 24.11 (tests/scheduler/test_slurm_block.py)
# minbase skips Recommends; Slurm's daemons and clients bring their libraries and plugins
# (slurm-wlm-basic-plugins) as dependencies.
PACKAGES = ("slurmctld", "slurmd", "slurm-client")
# Slurm's daemons resolve SlurmctldHost and NodeHostname; debootstrap leaves /etc/hosts empty.
_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def _suite(suite: str | None) -> str:
    suite = suite or SUITE
    if suite not in SUITES:
        raise ImageError(f"no Slurm root recipe for suite {suite!r} (known: {', '.join(SUITES)})")
    return suite


def recipe(suite: str | None = None) -> dict:
    """Everything that decides a suite's root; its hash names the cached root."""
    suite = _suite(suite)
    body = {"suite": suite, "mirror": MIRROR, "packages": sorted(PACKAGES), "hosts": _HOSTS}
    if SUITES[suite][1]:  # named only where there is one (trixie's recipe, and key, as before)
        body["script"] = SUITES[suite][1]
    return body


def recipe_key(suite: str | None = None) -> str:
    return hashlib.sha256(json.dumps(recipe(suite), sort_keys=True).encode()).hexdigest()[:16]


def ensure_root(
    suite: str | None = None, log: Callable[[str], None] = print
) -> tuple[Path, float | None]:
    """The suite's root (`<cache>/slurm-<suite>-<key>/root`; trixie unless named), built first
    if the cache has none for this recipe, and the seconds spent building it now (None: it was
    cached)."""
    suite = _suite(suite)
    d, built_s = cached_build(
        f"slurm-{suite}", recipe_key(suite), lambda final: _build(final, suite, log)
    )
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


def _check_tools(suite: str) -> None:
    if os.geteuid() != 0:
        raise ImageError(f"building the Slurm {SUITES[suite][0]} root needs root (debootstrap)")
    if shutil.which("debootstrap") is None:
        raise ImageError("missing debootstrap; run `bash scripts/setup.sh --test` to install it")


def _build(final: Path, suite: str, log: Callable[[str], None]) -> None:
    _check_tools(suite)
    t0 = time.monotonic()
    log(f"testbed: building the Slurm root with debootstrap ({suite}: {', '.join(PACKAGES)})")

    def finish(work: Path, root: Path) -> None:
        (root / "etc/hosts").write_text(_HOSTS)
        for deb in (root / "var/cache/apt/archives").glob("*.deb"):
            deb.unlink()
        version = slurm_version(root)
        if not version:
            raise ImageError("debootstrap's root has no slurmctld package")
        log(f"testbed: Slurm root ready in {time.monotonic() - t0:.0f} s (slurmctld {version})")

    debootstrap_build(final, suite, PACKAGES, recipe(suite), finish, SUITES[suite][1])
