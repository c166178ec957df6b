"""The rackform.gpu collection as a user gets it: `ansible-galaxy collection build` makes the
tarball from the package's copy, and `ansible-galaxy collection install --offline` puts it into
a collections path of the user's, with no Galaxy server reached (its dependencies, ansible.posix
and community.general, are the ones the `ansible` package installs into site-packages). The
installed files are the package's files, listed with their checksums in FILES.json; the
collection's version is the rackform package's."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml
from gpu_collection import COLLECTION

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# What build_ignore in galaxy.yml keeps out of the tarball (and so out of an install).
IGNORED_DIRS = {"__pycache__"}
IGNORED_SUFFIXES = {".pyc"}


def closed_port() -> int:
    """A loopback port nothing listens on: a Galaxy server there refuses every connection."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def galaxy(*args, collections: Path | None = None, **env) -> subprocess.CompletedProcess:
    """`ansible-galaxy ARGS`, with the only Galaxy server one that refuses connections, so a
    command that tried to reach Galaxy would fail, saying so."""
    environ = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_GALAXY_SERVER": f"http://127.0.0.1:{closed_port()}/",
        **({"ANSIBLE_COLLECTIONS_PATH": str(collections)} if collections else {}),
        **env,
    }
    return subprocess.run(
        [BIN / "ansible-galaxy", *map(str, args)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=300,
    )


def build(source: Path, out: Path) -> Path:
    done = galaxy("collection", "build", "--output-path", out, source)
    assert done.returncode == 0, done.stdout + done.stderr
    (tarball,) = out.glob("rackform-gpu-*.tar.gz")
    return tarball


def shipped(root: Path) -> set[str]:
    """The collection's files under `root`, relative, less what build_ignore keeps out."""
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file()
        and not IGNORED_DIRS & set(p.relative_to(root).parts)
        and p.suffix not in IGNORED_SUFFIXES
        and not p.relative_to(root).as_posix().startswith("tests/output/")
    }


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    return build(COLLECTION, tmp_path_factory.mktemp("galaxy-build"))


@pytest.fixture(scope="module")
def installed(tarball, tmp_path_factory) -> Path:
    """The collections path the tarball was installed into (holding ansible_collections/)."""
    path = tmp_path_factory.mktemp("collections")
    done = galaxy("collection", "install", "--offline", "-p", path, tarball, collections=path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rackform.gpu:" + VERSION + " was installed successfully" in done.stdout, done.stdout
    # The dependencies were found installed (the `ansible` package's), not fetched.
    for dep in ("ansible.posix", "community.general"):
        assert f"'{dep}:" in done.stdout and "is already installed, skipping" in done.stdout
    return path


def test_galaxy_yml_version_is_the_package_version():
    galaxy_yml = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    assert (galaxy_yml["namespace"], galaxy_yml["name"]) == ("rackform", "gpu")
    assert galaxy_yml["version"] == VERSION


def test_the_tarball_is_named_for_the_package_version(tarball):
    assert tarball.name == f"rackform-gpu-{VERSION}.tar.gz"
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    assert {"MANIFEST.json", "FILES.json", "README.md", "playbooks/site.yml"} <= names
    assert "galaxy.yml" not in names  # build turns it into MANIFEST.json


def test_build_leaves_test_output_and_bytecode_out(tmp_path):
    """build_ignore: what tests and ansible-test leave in a collection is not shipped."""
    source = tmp_path / "ansible_collections" / "rackform" / "gpu"
    shutil.copytree(COLLECTION, source)
    litter = [
        "tests/output/.tmp/sanity/result.json",
        "plugins/modules/__pycache__/nvme_raid_probe.cpython-311.pyc",
        "plugins/module_utils/sysfs.pyc",
        "roles/smoke_train/files/validators/__pycache__/report.cpython-311.pyc",
    ]
    for name in litter:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(b"litter")
    with tarfile.open(build(source, tmp_path / "out")) as tar:
        names = set(tar.getnames())
    assert "plugins/modules/nvme_raid_probe.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")], sorted(names)
    assert not [n for n in names if n.startswith("tests/output")], sorted(names)


def test_install_puts_the_package_collection_in_the_users_path(installed):
    dest = installed / "ansible_collections" / "rackform" / "gpu"
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    info = manifest["collection_info"]
    assert (info["namespace"], info["name"], info["version"]) == ("rackform", "gpu", VERSION)
    assert info["dependencies"] == {"ansible.posix": ">=1.5.0", "community.general": ">=8.0.0"}
    assert info["license"] == ["Apache-2.0"]

    # Every file of the package's collection, and nothing else (MANIFEST.json and FILES.json
    # stand for galaxy.yml), each listed in FILES.json with the checksum of what is installed.
    files = json.loads((dest / "FILES.json").read_text())["files"]
    listed = {f["name"]: f for f in files if f["ftype"] == "file"}
    expected = (shipped(COLLECTION) - {"galaxy.yml"}) | {"MANIFEST.json", "FILES.json"}
    assert shipped(dest) == expected
    assert set(listed) == expected - {"MANIFEST.json", "FILES.json"}
    for name, entry in listed.items():
        assert entry["chksum_type"] == "sha256"
        assert hashlib.sha256((dest / name).read_bytes()).hexdigest() == entry["chksum_sha256"]
        assert (dest / name).read_bytes() == (COLLECTION / name).read_bytes(), name

    for module in ("nvme_raid_probe", "nvidia_driver_probe", "nccl_rdma_probe"):
        assert (dest / "plugins" / "modules" / f"{module}.py").is_file()
    assert (dest / "plugins" / "module_utils" / "sysfs.py").is_file()
    for role in (
        "dcgm",
        "host_bootstrap",
        "nccl_rdma",
        "nvidia_driver",
        "nvme_raid",
        "slurm",
        "smoke_train",
    ):
        for part in ("tasks/main.yml", "meta/main.yml", "meta/argument_specs.yml", "README.md"):
            assert (dest / "roles" / role / part).is_file(), f"{role}/{part}"
    assert (dest / "roles" / "smoke_train" / "files" / "validators" / "smoke.py").is_file()
    assert (dest / "playbooks" / "site.yml").is_file()
    assert (dest / "meta" / "runtime.yml").is_file() and (dest / "README.md").is_file()


def test_ansible_uses_the_installed_collection(installed):
    """With ANSIBLE_COLLECTIONS_PATH at the install, Ansible finds the modules, roles and the
    site playbook there (by their FQCNs), not in the package."""
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(installed), "ANSIBLE_NOCOLOR": "1"}
    dest = installed / "ansible_collections" / "rackform" / "gpu"
    doc = subprocess.run(
        [BIN / "ansible-doc", "--json", "rackform.gpu.nvme_raid_probe"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert doc.returncode == 0, doc.stderr
    found = json.loads(doc.stdout)["rackform.gpu.nvme_raid_probe"]["doc"]["filename"]
    assert found == str(dest / "plugins" / "modules" / "nvme_raid_probe.py")
    syntax = subprocess.run(
        [BIN / "ansible-playbook", "--syntax-check", "-i", "localhost,", "rackform.gpu.site"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert syntax.returncode == 0, syntax.stdout + syntax.stderr
    assert f"playbook: {dest / 'playbooks' / 'site.yml'}" in syntax.stdout, syntax.stdout


def test_install_resolves_its_dependencies_from_the_ansible_package(tarball, tmp_path):
    """--offline reaches no server: hide the `ansible` package's collections (Ansible's scan
    of sys.path) and the install fails on the first dependency instead of downloading it."""
    path = tmp_path / "collections"
    done = galaxy(
        "collection", "install", "--offline", "-p", path, tarball,
        collections=path, ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
    )  # fmt: skip
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "Could not satisfy the following requirements" in out and "ansible.posix" in out, out
    assert not (path / "ansible_collections" / "rackform" / "gpu").exists()
