"""One owner per file on a host: no two roles write the same path (two writers from two sets of
variables rewrite each other's file on every run, and a second converge never says changed=0).
NVIDIA's CUDA apt source, which nvidia_driver and dcgm both need, is written by one task
(nvidia_driver's tasks/cuda_repo.yml, which dcgm enters) from one set of variables; with the
driver from the distribution the repository is there for DCGM alone (neither Debian nor Ubuntu
ships DCGM) and pinned below the distribution, which real apt shows on two local repositories."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from gpu_collection import ROLES_DIR
from role_writes import ROLES, entries, render, variables, writes

SOURCE = "/etc/apt/sources.list.d/nvidia-cuda.sources"
PIN = "/etc/apt/preferences.d/rackform-nvidia-cuda.pref"
MIRROR = "https://mirror.example.com/nvidia/cuda/repos"


def _all_writes():
    return [w for role in ROLES for w in writes(role)]


def test_every_path_on_a_host_is_written_by_one_role():
    owners: dict[str, set[str]] = defaultdict(set)
    resolved = 0
    for w in _all_writes():
        if not w.path.startswith(f"{w.role}:"):  # rendered: a path a host has
            owners[w.path].add(w.role)
            resolved += 1
    assert resolved > 50  # the check sees the roles' files, not only what it could not render
    shared = {path: sorted(roles) for path, roles in owners.items() if len(roles) > 1}
    assert not shared, f"written by more than one role: {shared}"


def test_the_cuda_source_is_one_task_that_dcgm_enters():
    writers = {(w.role, w.where) for w in _all_writes() if w.path in (SOURCE, PIN)}
    assert writers == {("nvidia_driver", "tasks/cuda_repo.yml")}
    assert ("nvidia_driver", "cuda_repo.yml") in entries("dcgm")
    # dcgm keeps no repository variables of its own (a second place to set a mirror).
    assert not [v for v in variables("dcgm", "Ubuntu") if v.startswith("dcgm_cuda_repo")]


@pytest.mark.parametrize("os_name", ["Ubuntu", "Debian"])
def test_a_mirror_set_for_the_cluster_is_what_every_writer_writes(os_name):
    # The mirror is set where an operator sets the driver's (the cluster's group variables);
    # whichever role's run writes the source, it writes the same lines.
    cluster = {"nvidia_driver_cuda_repo_url": MIRROR}
    written = set()
    for w in _all_writes():
        if w.path == SOURCE and w.module.endswith("deb822_repository"):
            env = variables(w.role, os_name, cluster)
            uris = tuple(render(w.args["uris"], env))
            written.add((w.role, uris, render(w.args["signed_by"], env)))
    distro = {"Ubuntu": "ubuntu2204", "Debian": "debian12"}[os_name]
    repo = f"{MIRROR}/{distro}/x86_64/"
    assert {(uris, key) for _, uris, key in written} == {((repo,), repo + "3bf863cc.pub")}, written


def _pin(source: str) -> str | None:
    """The pin the role writes for nvidia_driver_source `source` (None: it removes it)."""
    pins = {
        (w.task, w.args.get("state"), w.args.get("src"))
        for w in writes("nvidia_driver")
        if w.path == PIN
    }
    ((write, _, src),) = [p for p in pins if p[1] != "absent"]
    ((gone, _, _),) = [p for p in pins if p[1] == "absent"]
    env = variables("nvidia_driver", "Ubuntu", {"nvidia_driver_source": source})
    when = {t["name"]: t.get("when", "true") for t in _cuda_repo_tasks()}
    if render("{{ " + when[gone] + " }}", env) is True:
        return None
    assert render("{{ " + when[write] + " }}", env) is True
    template = (ROLES_DIR / "nvidia_driver" / "templates" / src).read_text()
    return render(template, {**env, "ansible_managed": "Ansible managed"})


def _cuda_repo_tasks() -> list[dict]:
    return yaml.safe_load((ROLES_DIR / "nvidia_driver" / "tasks" / "cuda_repo.yml").read_text())


def _apt_policy(tmp_path: Path, pin: str | None) -> dict[str, str]:
    """apt's candidate for the driver and DCGM, with the distribution's archive (driver 550.120)
    and NVIDIA's CUDA repository (label "NVIDIA CUDA": driver 550.127.08, DCGM) as sources, and
    `pin` in preferences.d: real apt-get update and apt-cache policy over a root of its own."""
    for tool in ("apt-get", "apt-cache"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (this project's machines are Debian)")
    root = tmp_path / "apt"

    def repo(name: str, label: str, packages: list[tuple[str, str]]) -> Path:
        where = root / "repos" / name
        where.mkdir(parents=True)
        index = "".join(
            f"Package: {p}\nVersion: {v}\nArchitecture: amd64\nMaintainer: x <x@example.com>\n"
            f"Filename: {p}_{v}.deb\nSize: 1\nSHA256: {'0' * 64}\nDescription: {p}\n\n"
            for p, v in packages
        )
        (where / "Packages").write_text(index)
        digest = hashlib.sha256(index.encode()).hexdigest()
        (where / "Release").write_text(
            f"Origin: {label}\nLabel: {label}\nSuite: stable\nDate: Thu, 01 Jan 2026 00:00:00 UTC\n"
            f"SHA256:\n {digest} {len(index)} Packages\n"
        )
        return where

    distro = repo("distro", "Ubuntu", [("nvidia-driver-550", "550.120-0ubuntu0.22.04.1")])
    cuda = repo("cuda", "NVIDIA CUDA", [("nvidia-driver-550", "550.127.08-0ubuntu1"),
                                         ("datacenter-gpu-manager", "1:3.3.9")])  # fmt: skip
    for d in ("etc/apt/apt.conf.d", "etc/apt/sources.list.d", "etc/apt/preferences.d",
              "var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/lib/dpkg"):  # fmt: skip
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "var/lib/dpkg/status").write_text("")
    (root / "etc/apt/sources.list.d/test.list").write_text(
        f"deb [trusted=yes] file:{distro} ./\ndeb [trusted=yes] file:{cuda} ./\n"
    )
    if pin is not None:
        (root / "etc/apt/preferences.d/rackform-nvidia-cuda.pref").write_text(pin)
    conf = root / "apt.conf"
    conf.write_text(
        f'Dir "{root}/";\nDir::Etc::main "{conf}";\nDir::State::status "{root}/var/lib/dpkg/status";\n'
        'APT::Architecture "amd64";\nAPT::Architectures { "amd64"; };\nDebug::NoLocking "true";\n'
    )
    env = {**os.environ, "APT_CONFIG": str(conf)}
    update = subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, text=True)
    assert update.returncode == 0, update.stdout + update.stderr
    out = {}
    for package in ("nvidia-driver-550", "datacenter-gpu-manager"):
        policy = subprocess.run(
            ["apt-cache", "policy", package], env=env, capture_output=True, text=True
        )
        (line,) = [ln for ln in policy.stdout.splitlines() if "Candidate:" in ln]
        out[package] = line.split(":", 1)[1].strip()
    return out


def test_with_the_distributions_driver_nvidias_repository_serves_dcgm_alone(tmp_path):
    # The hazard: NVIDIA's repository carries the same driver packages at higher versions, so
    # with it added for DCGM an upgrade would take the driver from it.
    assert _apt_policy(tmp_path / "bare", None)["nvidia-driver-550"] == "550.127.08-0ubuntu1"
    pin = _pin("distribution")
    assert pin is not None
    got = _apt_policy(tmp_path / "pinned", pin)
    assert got == {
        "nvidia-driver-550": "550.120-0ubuntu0.22.04.1",
        "datacenter-gpu-manager": "1:3.3.9",
    }
    # With the driver from NVIDIA's repository, no pin: it is where the driver comes from.
    assert _pin("cuda_repo") is None
