"""The scaffolding the base image's and the Slurm root's builds share
(`image.debootstrap_build`): debootstrap's command line, the build's own steps on its root, the
recipe and `done` written last, the work directory renamed into place, and nothing left behind
when a step fails. debootstrap needs root and Debian's archive, so a stand-in on PATH records
its command line and makes a root as debootstrap would leave one (a directory with a file);
everything else is the real code."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from rackform.testbed import image


@pytest.fixture
def debootstrap(tmp_path, monkeypatch) -> Path:
    """A stand-in `debootstrap` first on PATH; returns the file its arguments go to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "debootstrap.args"
    (bin_dir / "debootstrap").write_text(
        "#!/bin/sh\n"
        f'for a; do echo "$a"; done > {seen}\n'
        # the target is the fifth argument: minbase, include, suite, target, mirror
        'mkdir -p "$4/etc" && echo root > "$4/etc/debian_version"\n'
    )
    (bin_dir / "debootstrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return seen


def test_a_finished_build_is_renamed_into_place_with_its_recipe(tmp_path, debootstrap):
    final = tmp_path / "cache" / "slurm-trixie-k1"
    final.parent.mkdir()
    steps = []

    def finish(work: Path, root: Path) -> None:
        steps.append((work.name, (root / "etc/debian_version").read_text()))
        (work / "product").write_text("made")

    image.debootstrap_build(final, "trixie", ("slurmctld", "slurmd"), {"suite": "trixie"}, finish)
    assert debootstrap.read_text().splitlines() == [
        "--variant=minbase", "--include=slurmctld,slurmd", "trixie",
        str(final.with_name(f".build-{final.name}-{os.getpid()}") / "root"), image.MIRROR,
    ]  # fmt: skip
    assert steps == [(f".build-{final.name}-{os.getpid()}", "root\n")]
    assert (final / "done").exists() and (final / "product").read_text() == "made"
    assert json.loads((final / "recipe.json").read_text()) == {"suite": "trixie"}
    assert [p.name for p in final.parent.iterdir()] == [final.name]  # no work directory left


def test_a_failed_step_leaves_nothing_and_keeps_the_previous_build(tmp_path, debootstrap):
    final = tmp_path / "cache" / "base-k1"
    (final).mkdir(parents=True)
    (final / "done").write_text("")  # what an earlier finished build left

    def finish(work: Path, root: Path) -> None:
        raise image.ImageError("debootstrap's root has no slurmctld package")

    with pytest.raises(image.ImageError, match="no slurmctld"):
        image.debootstrap_build(final, "bookworm", ("python3",), {}, finish)
    assert [p.name for p in final.parent.iterdir()] == [final.name]
    assert (final / "done").exists()


def test_a_failing_debootstrap_is_an_image_error_with_its_output(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "debootstrap").write_text(
        "#!/bin/sh\necho 'E: Failed getting release file' >&2\nexit 1\n"
    )
    (bin_dir / "debootstrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    final = tmp_path / "cache" / "base-k2"
    final.parent.mkdir()
    with pytest.raises(
        image.ImageError, match=re.escape("debootstrap failed (exit 1):\nE: Failed getting")
    ):
        image.debootstrap_build(final, "bookworm", ("python3",), {}, lambda w, r: None)
    assert list(final.parent.iterdir()) == []
