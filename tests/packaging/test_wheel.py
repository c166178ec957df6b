"""What a user installs: the wheel and sdist carry every file of the package (the engine, the
catalog, the testbed's guest files) and the rackform.gpu collection (roles, modules, site
playbook, validators) built from the repository's top level, exactly what the top level holds,
and nothing of the working tree's caches. Their sizes are printed."""

from __future__ import annotations

import tarfile
import zipfile

import pytest
from dist_build import ROOT, tracked

IN_WHEEL = "rackform/ansible_collections/rackform/gpu/"


def collection_from_top_level() -> dict[str, str]:
    """The collection's files as the repository's top level lays them out, each by its path in
    the collection (stated here on its own, not read from rackform.collection)."""
    where = {
        "collection/": "",
        "roles/": "roles/",
        "validators/": "roles/smoke_train/files/validators/",
    }
    return {
        dest + path.removeprefix(source): path
        for source, dest in where.items()
        for path in tracked(source)
    }


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
        "rackform/blueprint/targets/aws/catalog/instances.yaml",
        "rackform/blueprint/schema/model.py",
        "rackform/collection.py",
        "rackform/plan/targets/bare_metal/init/training.yaml",
        "rackform/testbed/guest/rackform-firstboot.sh",
    ):
        assert rel in wheel_names, rel
    print(f"\nwheel {dist.wheel.name}: {dist.wheel.stat().st_size / 1e6:.2f} MB, "
          f"{len(wheel_names)} files")  # fmt: skip


def test_the_wheels_collection_is_exactly_the_top_level(dist, wheel_names):
    expected = collection_from_top_level()
    shipped = {n.removeprefix(IN_WHEEL) for n in wheel_names if n.startswith(IN_WHEEL)}
    assert shipped == set(expected), (
        f"in the wheel only: {sorted(shipped - set(expected))};"
        f" at the top level only: {sorted(set(expected) - shipped)}"
    )
    # Named one by one, so a mistake in `tracked` cannot empty the check.
    for rel in ("galaxy.yml", "meta/runtime.yml", "playbooks/site.yml",
                "plugins/module_utils/sysfs.py", "plugins/modules/nvme_raid_probe.py",
                "roles/nvme_raid/meta/argument_specs.yml",
                "roles/smoke_train/files/validators/smoke.py"):  # fmt: skip
        assert rel in shipped, rel
    roles = {n.split("/")[1] for n in shipped if n.startswith("roles/")}
    assert roles == {"nvidia_driver", "nccl_rdma", "nvme_raid", "dcgm", "imex", "shared_storage", "slurm",
                     "smoke_train", "host_bootstrap"}  # fmt: skip
    with zipfile.ZipFile(dist.wheel) as z:
        for rel, source in expected.items():
            assert z.read(IN_WHEEL + rel) == (ROOT / source).read_bytes(), rel


def test_nothing_of_the_collection_is_committed_twice():
    # The collection inside the package and a checkout's build/ are made, never committed.
    assert tracked("rackform/ansible_collections") == []
    assert tracked("build") == []
    assert tracked("roles") and tracked("validators") and tracked("collection")


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
    assert {"pyproject.toml", "README.md", "setup.py", "MANIFEST.in"} <= names
    package = {n for n in wheel_names if n.startswith("rackform/") and not n.startswith(IN_WHEEL)}
    assert package <= names, sorted(package - names)
    # The collection's sources, as the top level holds them: the wheel is built from these.
    sources = set(collection_from_top_level().values())
    assert sources <= names, sorted(sources - names)
    assert not [n for n in names if n.startswith("rackform/ansible_collections/")]
    print(f"\nsdist {dist.sdist.name}: {dist.sdist.stat().st_size / 1e6:.2f} MB")
