"""The base image's recipe: what decides the cached image; that it holds nothing a role installs
(the roles bring it, as on a host built elsewhere) and that the local package repository the
tests serve to the VMs holds all of it (so a converge reaches nothing outside the machine)."""

from __future__ import annotations

from pathlib import Path

import yaml

from rackform import paths
from rackform.paths import CHECKOUT
from rackform.testbed import image

# Priority required/important packages that debootstrap's minbase always installs.
MINBASE = {"e2fsprogs", "util-linux"}


def test_the_recipe_key_is_stable_and_follows_the_packages(monkeypatch):
    key = image.recipe_key()
    assert key == image.recipe_key() and len(key) == 16
    monkeypatch.setattr(image, "PACKAGES", (*image.PACKAGES, "htop"))
    assert image.recipe_key() != key


def test_the_recipe_follows_the_guest_files():
    files = image.recipe()["files"]
    assert set(files) == set(image._GUEST_FILES)
    assert all(len(h) == 64 for h in files.values())


def test_the_cache_dir_can_be_moved(monkeypatch, tmp_path):
    for name in ("RACKFORM_TESTBED_CACHE", "RACKFORM_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    assert image.cache_dir() == Path.home() / ".cache" / "rackform" / "testbed"
    # XDG's rule: an empty or relative XDG_CACHE_HOME is ignored.
    for ignored in ("", "relative/cache"):
        monkeypatch.setenv("XDG_CACHE_HOME", ignored)
        assert image.cache_dir() == Path.home() / ".cache" / "rackform" / "testbed"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert image.cache_dir() == tmp_path / "xdg" / "rackform" / "testbed"
    assert paths.cache_dir() == tmp_path / "xdg" / "rackform"
    monkeypatch.setenv("RACKFORM_CACHE", str(tmp_path / "rf"))
    assert image.cache_dir() == tmp_path / "rf" / "testbed"
    monkeypatch.setenv("RACKFORM_TESTBED_CACHE", str(tmp_path / "tb"))
    assert image.cache_dir() == tmp_path / "tb"


def test_the_local_repository_carries_every_debian_package_the_roles_install():
    from rackform.testbed.apt import ROLE_PACKAGES

    wanted = set()
    # Per-OS lists in vars/Debian.yml; one list for every OS in vars/main.yml (slurm).
    for path in [
        *(CHECKOUT / "roles").glob("*/vars/Debian.yml"),
        *(CHECKOUT / "roles").glob("*/vars/main.yml"),
    ]:
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            if name.endswith("_packages") and "nvidia" not in name and isinstance(value, list):
                wanted |= set(value)
    wanted.add("python3-venv")  # smoke_train
    defaults = CHECKOUT / "roles" / "host_bootstrap" / "defaults" / "main.yml"
    wanted |= set(yaml.safe_load(defaults.read_text())["host_bootstrap_packages"])
    missing = wanted - set(ROLE_PACKAGES) - MINBASE
    assert not missing, f"the testbed would need the network to install {sorted(missing)}"


def test_ansible_reaches_the_image_and_nothing_more():
    # ssh and python for Ansible itself; what its modules need the roles install.
    assert {"python3", "openssh-server"} <= set(image.PACKAGES)


def test_clones_get_their_own_identity_at_boot():
    script = (Path(image.__file__).parent / "guest" / "rackform-firstboot.sh").read_text()
    assert "ssh-keygen" in script and "rackform.sshkey=" in script and "rackform.priv=" in script
    assert (
        "rackform-firstboot.service"
        in image._LINKS["multi-user.target.wants/rackform-firstboot.service"]
    )


def test_the_image_holds_nothing_a_role_installs():
    # The roles must bring what they need (as on a host built elsewhere): a package in the
    # image would hide a role that forgets to install it.
    from rackform.testbed.apt import ROLE_PACKAGES

    assert set(image.PACKAGES) & set(ROLE_PACKAGES) == set()
    assert "python3-apt" not in image.PACKAGES


def test_the_local_repository_index_is_what_apt_reads(tmp_path):
    import hashlib
    import subprocess

    from rackform.testbed.apt import sources_line, write_index

    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        "Package: rf-demo\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.com>\n"
        "Description: demo\n"
    )
    subprocess.run(["dpkg-deb", "--build", str(pkg), str(tmp_path / "rf-demo_1.0_all.deb")],
                   check=True, capture_output=True)  # fmt: skip
    repo = tmp_path
    write_index(repo)
    packages = (repo / "Packages").read_text()
    assert "Package: rf-demo\n" in packages and "Filename: ./rf-demo_1.0_all.deb\n" in packages
    data = (repo / "rf-demo_1.0_all.deb").read_bytes()
    assert f"SHA256: {hashlib.sha256(data).hexdigest()}" in packages
    release = (repo / "Release").read_text()
    assert hashlib.sha256((repo / "Packages").read_bytes()).hexdigest() in release
    assert sources_line(8080) == "deb [trusted=yes] http://10.0.2.2:8080/ ./\n"


def test_a_cached_build_is_built_once_per_recipe_and_older_ones_go(monkeypatch, tmp_path):
    # The base image and the package repository share this: build once, reuse while the
    # recipe's key holds, drop the builds of older recipes when a new one is made.
    monkeypatch.setenv("RACKFORM_TESTBED_CACHE", str(tmp_path))
    built = []

    def build(final: Path) -> None:
        built.append(final.name)
        final.mkdir()
        (final / "done").write_text("")

    first, seconds = image.cached_build("apt", "k1", build)
    assert first == tmp_path / "apt-k1" and seconds is not None
    assert image.cached_build("apt", "k1", build) == (first, None)
    image.cached_build("base", "k1", build)  # another kind is left alone
    assert image.cached_build("apt", "k2", build)[0] == tmp_path / "apt-k2"
    assert built == ["apt-k1", "base-k1", "apt-k2"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "apt-k2",
        "base-k1",
    ]


def test_the_image_with_torch_is_named_by_its_wheels_too(tmp_path):
    from rackform.testbed.apt import BAKED_PACKAGES
    from rackform.testbed.image import recipe, recipe_key

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"x" * 10)
    key = recipe_key(BAKED_PACKAGES, wheels)
    assert key != recipe_key(BAKED_PACKAGES)
    assert recipe(BAKED_PACKAGES, wheels)["venv"]["path"] == "/opt/rackform/venv"
    (wheels / "numpy-2.3.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"y")
    assert recipe_key(BAKED_PACKAGES, wheels) != key  # another wheel, another image


def test_the_image_with_torch_starts_from_a_finished_baked_images_tree(monkeypatch, tmp_path):
    from rackform.testbed.apt import BAKED_PACKAGES

    monkeypatch.setenv("RACKFORM_TESTBED_CACHE", str(tmp_path))
    baked = tmp_path / f"baked-{image.recipe_key(BAKED_PACKAGES)}"
    assert image._baked_tree(BAKED_PACKAGES) is None  # no baked image: debootstrap
    baked.mkdir()
    (baked / image.TREE).write_bytes(b"")
    assert image._baked_tree(BAKED_PACKAGES) is None  # a build cut short: no `done`
    (baked / "done").write_text("")
    assert image._baked_tree(BAKED_PACKAGES) == baked / image.TREE
    assert image._baked_tree(()) is None  # the base image has no baked tree
    # A baked image of another package list (an older recipe) is not this one's.
    assert image._baked_tree((*BAKED_PACKAGES, "htop")) is None
    # The tree is part of the baked image's recipe: a cached one without it is built again.
    assert image.recipe(BAKED_PACKAGES)["tree"] == image.TREE


def test_the_tree_keeps_owners_modes_and_file_capabilities(tmp_path):
    import os

    src, dest = tmp_path / "src", tmp_path / "dest"
    (src / "bin").mkdir(parents=True)
    ping = src / "bin" / "ping"
    ping.write_bytes(b"\x7fELF")
    os.chown(ping, 1234, 5678)  # before chmod: chown clears the setuid bit
    ping.chmod(0o4755)
    cap = bytes.fromhex("0100000200200000000000000000000000000000")  # cap_net_raw=ep
    os.setxattr(ping, "security.capability", cap)
    (src / "lib").symlink_to("usr/lib")
    tar = tmp_path / image.TREE
    image.pack_tree(src, tar)
    dest.mkdir()
    image.unpack_tree(tar, dest)
    got = (dest / "bin" / "ping").stat()
    assert (got.st_mode & 0o7777, got.st_uid, got.st_gid) == (0o4755, 1234, 5678)
    assert os.getxattr(dest / "bin" / "ping", "security.capability") == cap
    assert os.readlink(dest / "lib") == "usr/lib"
