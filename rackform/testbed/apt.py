"""A local Debian package repository for the testbed's VMs. The base image holds no package a
role installs or needs pre-installed (the roles bring their own, as on a host built elsewhere);
this repository holds those packages, with everything they depend on, downloaded once with
`debootstrap --download-only` from the image's suite and mirror, with a flat index that apt
reads (`deb [trusted=yes] http://HOST:PORT/ ./`). The tests serve it on 127.0.0.1; the VMs
reach it at 10.0.2.2, so a converge fetches nothing from outside the machine.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from email.utils import formatdate
from pathlib import Path

from rackform.testbed.image import MIRROR, PACKAGES, SUITE, _check_tools, _run, cached_build

# What the roles install on a Debian 12 host without GPUs (the testbed's), and what their
# modules need there: python3-apt (the apt module, check mode included) and python3-packaging
# (the pip module) come from host_bootstrap; python3-debian is the deb822_repository module's.
ROLE_PACKAGES = (
    "python3-apt",
    "python3-packaging",
    "python3-debian",
    "python3-venv",
    "mdadm",
    "xfsprogs",
    "nvme-cli",
    "rdma-core",
    "ibverbs-utils",
    "perftest",
    "infiniband-diags",
    # dcgm: node_exporter on every node, GPUs or not.
    "prometheus-node-exporter",
    # shared_storage: the NFS client on every node, the server on the host that serves it.
    "nfs-common",
    "nfs-kernel-server",
    # slurm: munge and Slurm's daemons and commands; with `scheduler.fairness`, Slurm's
    # accounting database on the controller (the e2e declares none, so the VMs install neither,
    # but a blueprint with fairness converges on the testbed without the network).
    "munge",
    "slurmd",
    "slurm-client",
    "slurmctld",
    "mariadb-server",
    "slurmdbd",
)


def repo_key() -> str:
    body = {"suite": SUITE, "mirror": MIRROR, "base": sorted(PACKAGES), "roles": ROLE_PACKAGES}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def ensure_repo(log: Callable[[str], None] = print) -> Path:
    """The repository's directory (built first if this recipe has none): the .deb files, a
    `Packages` index and a `Release` file."""
    return cached_build("apt", repo_key(), lambda final: _build(final, log))[0]


def _build(final: Path, log: Callable[[str], None]) -> None:
    _check_tools()
    work = final.with_name(f".build-{final.name}")
    shutil.rmtree(work, ignore_errors=True)
    target = work / "download"
    target.mkdir(parents=True)
    start = time.monotonic()
    log(f"testbed: downloading the roles' {len(ROLE_PACKAGES)} packages with their dependencies")
    include = ",".join([*PACKAGES, *ROLE_PACKAGES])
    argv = ["debootstrap", "--download-only", "--variant=minbase", f"--include={include}"]
    _run([*argv, SUITE, str(target), MIRROR], "debootstrap --download-only")
    repo = work / "repo"
    repo.mkdir()
    for deb in sorted((target / "var/cache/apt/archives").glob("*.deb")):
        shutil.move(str(deb), repo / deb.name)
    write_index(repo)
    (repo / "done").write_text("")
    shutil.rmtree(final, ignore_errors=True)
    repo.rename(final)
    shutil.rmtree(work, ignore_errors=True)
    log(f"testbed: package repository ready in {time.monotonic() - start:.0f} s ({final})")


def write_index(repo: Path) -> None:
    """`Packages` (each .deb's control fields, where it is and its hashes) and a `Release` that
    lists the index with its hash: what apt needs of a flat repository."""
    paragraphs = []
    for deb in sorted(repo.glob("*.deb")):
        control = subprocess.run(
            ["dpkg-deb", "--field", str(deb)], capture_output=True, text=True, check=True
        ).stdout.rstrip("\n")
        data = deb.read_bytes()
        paragraphs.append(
            f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
            f"MD5sum: {hashlib.md5(data).hexdigest()}\n"  # an index field apt reads, not security
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n"
        )
    index = "\n".join(paragraphs).encode()
    (repo / "Packages").write_bytes(index)
    (repo / "Release").write_text(
        f"Date: {formatdate(usegmt=True)}\nSHA256:\n"
        f" {hashlib.sha256(index).hexdigest()} {len(index)} Packages\n"
    )


def sources_line(port: int) -> str:
    """The apt source a VM uses for the repository served on the host's 127.0.0.1:`port`."""
    return f"deb [trusted=yes] http://10.0.2.2:{port}/ ./\n"
