"""What a user installs: the wheel and sdist carry every file of the package (the engine, the
catalog, the testbed's guest files and the rackform.gpu collection: roles, modules, site
playbook, validators) and nothing of the working tree's caches. Their sizes are printed."""

from __future__ import annotations

import tarfile
import zipfile

import pytest
from dist_build import tracked

from rackform.paths import COLLECTION, PACKAGE, VALIDATORS_DIR

ROOT = PACKAGE.parent


def _rel(path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.fixture(scope="module")
def wheel_names(dist) -> set[str]:
    with zipfile.ZipFile(dist.wheel) as z:
        return set(z.namelist())


def test_the_wheel_holds_every_file_of_the_package(dist, wheel_names):
    package = tracked("rackform")
    missing = sorted(set(package) - wheel_names)
    assert not missing, f"left out of the wheel: {missing}"
    # The parts named one by one, so a mistake in `tracked` cannot empty the check.
    for rel in (
        "rackform/catalog/gpus.yaml",
        "rackform/catalog/instances.yaml",
        "rackform/blueprint/schema/model.py",
        _rel(COLLECTION / "galaxy.yml"),
        _rel(COLLECTION / "meta" / "runtime.yml"),
        _rel(COLLECTION / "playbooks" / "site.yml"),
        _rel(COLLECTION / "plugins" / "module_utils" / "sysfs.py"),
        _rel(COLLECTION / "plugins" / "modules" / "nvme_raid_probe.py"),
        _rel(COLLECTION / "roles" / "nvme_raid" / "meta" / "argument_specs.yml"),
        _rel(VALIDATORS_DIR / "smoke.py"),
        "rackform/init/templates/bare_metal-training.yaml",
        "rackform/testbed/guest/rackform-firstboot.sh",
    ):
        assert rel in wheel_names, rel
    roles = {n.split("/")[5] for n in wheel_names if n.startswith(_rel(COLLECTION / "roles"))}
    assert roles == {"nvidia_driver", "nccl_rdma", "nvme_raid", "dcgm", "smoke_train",
                     "host_bootstrap"}  # fmt: skip
    validators = {p.name for p in VALIDATORS_DIR.glob("*.py")}
    shipped = {n.rsplit("/", 1)[1] for n in wheel_names if n.startswith(_rel(VALIDATORS_DIR))}
    assert validators <= shipped
    print(f"\nwheel {dist.wheel.name}: {dist.wheel.stat().st_size / 1e6:.2f} MB, "
          f"{len(wheel_names)} files")  # fmt: skip


def test_the_wheel_carries_no_caches_or_test_output(wheel_names):
    junk = [n for n in wheel_names if "__pycache__" in n or n.endswith(".pyc")]
    junk += [n for n in wheel_names if "/tests/output/" in n or n.startswith("tests/")]
    assert not junk, junk
    assert all(n.startswith(("rackform/", "rackform-")) for n in wheel_names), sorted(
        n for n in wheel_names if not n.startswith(("rackform/", "rackform-"))
    )


def test_the_wheel_names_its_console_script_and_extras(dist, wheel_names):
    with zipfile.ZipFile(dist.wheel) as z:
        info = f"rackform-{dist.version}.dist-info"
        entry = z.read(f"{info}/entry_points.txt").decode()
        meta = z.read(f"{info}/METADATA").decode()
    assert "rackform = rackform.cli.main:main" in entry
    assert "Provides-Extra: deploy" in meta
    assert "Requires-Dist: ansible==" in meta  # the collections the roles use come with it


def test_the_sdist_builds_the_same_package(dist, wheel_names):
    with tarfile.open(dist.sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md"} <= names
    package = {n for n in wheel_names if n.startswith("rackform/")}
    assert package <= names, sorted(package - names)
    print(f"\nsdist {dist.sdist.name}: {dist.sdist.stat().st_size / 1e6:.2f} MB")
