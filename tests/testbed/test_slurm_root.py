"""The Slurm roots' recipes and cache (rackform/testbed/slurm_root.py): what names the
cached root, so a changed recipe builds a new one and drops the old, and how its Slurm version is
read. Building it is what tests/scheduler/test_slurm_block.py does, for real."""

from __future__ import annotations

import pytest

from rackform.testbed import image, slurm_root

STATUS = """Package: slurm-client
Status: install ok installed
Version: 24.11.5-4+deb13u1

Package: slurmctld
Status: install ok installed
Description: SLURM central management daemon
 Package: not-this-one
Version: 24.11.5-4+deb13u1
"""


def test_the_recipe_key_follows_the_suite_and_the_packages(monkeypatch):
    key = slurm_root.recipe_key()
    assert key == slurm_root.recipe_key() and len(key) == 16
    monkeypatch.setattr(slurm_root, "PACKAGES", (*slurm_root.PACKAGES, "slurmdbd"))
    assert slurm_root.recipe_key() != key
    monkeypatch.setattr(slurm_root, "PACKAGES", slurm_root.PACKAGES[:-1])
    assert slurm_root.recipe_key("trixie") == key  # trixie: the default suite
    assert slurm_root.recipe_key("forky") != key
    # forky's debootstrap script is sid's (Debian 12's debootstrap has none named forky).
    assert slurm_root.recipe("forky")["script"] == "sid" and "script" not in slurm_root.recipe()


def test_an_unknown_suite_is_refused():
    with pytest.raises(image.ImageError, match="no Slurm root recipe for suite 'bookworm'"):
        slurm_root.recipe("bookworm")


def test_a_new_recipe_builds_anew_and_drops_the_old(monkeypatch, tmp_path):
    monkeypatch.setenv("RACKFORM_TESTBED_CACHE", str(tmp_path))
    built = []

    def build(final):
        built.append(final.name)
        (final / "root").mkdir(parents=True)
        (final / "done").write_text("")

    monkeypatch.setattr(slurm_root, "_build", lambda final, suite, log: build(final))
    first, took = slurm_root.ensure_root()
    assert (
        took is not None and first == tmp_path / f"slurm-trixie-{slurm_root.recipe_key()}" / "root"
    )
    again, took = slurm_root.ensure_root()
    assert (again, took) == (first, None) and len(built) == 1  # cached: not built twice
    monkeypatch.setattr(slurm_root, "PACKAGES", (*slurm_root.PACKAGES, "slurmdbd"))
    second, _ = slurm_root.ensure_root()
    assert second != first and not first.parent.exists() and len(built) == 2
    assert image.cache_dir() == tmp_path
    forky, _ = slurm_root.ensure_root("forky")  # a suite of its own: trixie's root stays
    assert forky.parent.name.startswith("slurm-forky-") and second.exists() and len(built) == 3


def test_the_version_is_slurmctlds_own_record(tmp_path):
    (tmp_path / "var/lib/dpkg").mkdir(parents=True)
    (tmp_path / "var/lib/dpkg/status").write_text(STATUS)
    assert slurm_root.slurm_version(tmp_path) == "24.11.5-4+deb13u1"
    (tmp_path / "var/lib/dpkg/status").write_text(STATUS.split("\n\n")[0])
    assert slurm_root.slurm_version(tmp_path) == ""
