"""The base image's recipe: what decides the cached image, and that it carries what the roles
install (so a converge on the testbed needs no network)."""

from __future__ import annotations

from pathlib import Path

import yaml

from rackform.testbed import image

ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"
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
    monkeypatch.setenv("RACKFORM_TESTBED_CACHE", str(tmp_path))
    assert image.cache_dir() == tmp_path
    monkeypatch.delenv("RACKFORM_TESTBED_CACHE")
    assert image.cache_dir() == Path.home() / ".cache" / "rackform" / "testbed"


def test_the_image_carries_every_debian_package_the_roles_install():
    wanted = set()
    for path in ROLES_DIR.glob("*/vars/Debian.yml"):
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            if name.endswith("_packages") and "nvidia" not in name:
                wanted |= set(value)
    wanted.add("python3-venv")  # smoke_train
    missing = wanted - set(image.PACKAGES) - MINBASE
    assert not missing, f"the testbed would need the network to install {sorted(missing)}"


def test_ansible_can_manage_the_image():
    # apt and deb822_repository need these on the target; ssh and python for everything.
    assert {"python3", "python3-apt", "python3-debian", "openssh-server"} <= set(image.PACKAGES)


def test_clones_get_their_own_identity_at_boot():
    script = (Path(image.__file__).parent / "guest" / "rackform-firstboot.sh").read_text()
    assert "ssh-keygen" in script and "rackform.sshkey=" in script and "rackform.priv=" in script
    assert (
        "rackform-firstboot.service"
        in image._LINKS["multi-user.target.wants/rackform-firstboot.service"]
    )
