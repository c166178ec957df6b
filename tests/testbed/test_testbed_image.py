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
