"""`rackform testbed` as a user runs it, without booting (the e2e test boots VMs)."""

from __future__ import annotations

from blueprint_helpers import rackform


def test_down_with_no_testbed_says_so(tmp_path):
    proc = rackform("testbed", "down", "--dir", tmp_path / "tb")
    assert proc.returncode == 0 and "no testbed VMs were running" in proc.stdout


def test_up_refuses_an_impossible_node_count(tmp_path):
    proc = rackform("testbed", "up", "--nodes", "0", "--dir", tmp_path / "tb")
    assert proc.returncode == 2 and "--nodes" in proc.stderr
    assert not (tmp_path / "tb").exists()


def test_image_reports_a_cached_image(tmp_path, monkeypatch):
    from rackform.testbed.image import recipe_key

    cached = tmp_path / f"base-{recipe_key()}"
    cached.mkdir()
    (cached / "done").write_text("")
    monkeypatch.setenv("RACKFORM_TESTBED_CACHE", str(tmp_path))
    from rackform.testbed.apt import repo_key

    repo = tmp_path / f"apt-{repo_key()}"
    repo.mkdir()
    (repo / "done").write_text("")
    proc = rackform("testbed", "image")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines() == [
        f"base image: {cached} (cached)",
        f"packages: {repo}",
    ]


def test_image_without_debootstrap_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("RACKFORM_TESTBED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no debootstrap, no mkfs.ext4
    proc = rackform("testbed", "image")
    assert proc.returncode == 1
    assert "rackform testbed image:" in proc.stderr and "scripts/setup.sh --test" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_image_with_baked_reports_both_images(tmp_path, monkeypatch):
    from rackform.testbed.apt import (
        BAKED_PACKAGES,
        ROLE_PACKAGES,
        SCHEDULER_PACKAGES,
        SERVER_PACKAGES,
    )
    from rackform.testbed.image import recipe_key

    # The baked image is named by its own recipe (the base's plus the roles' packages): a
    # change to either list builds a new one, and the base image is never taken for it.
    assert recipe_key(BAKED_PACKAGES) != recipe_key()
    assert set(BAKED_PACKAGES) == set(ROLE_PACKAGES) - set(SCHEDULER_PACKAGES) - set(
        SERVER_PACKAGES
    )
    for kind, key in (("base", recipe_key()), ("baked", recipe_key(BAKED_PACKAGES))):
        (tmp_path / f"{kind}-{key}").mkdir()
        (tmp_path / f"{kind}-{key}" / "done").write_text("")
    monkeypatch.setenv("RACKFORM_TESTBED_CACHE", str(tmp_path))
    proc = rackform("testbed", "image", "--baked", "--no-packages")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines() == [
        f"base image: {tmp_path / f'base-{recipe_key()}'} (cached)",
        f"baked image: {tmp_path / f'baked-{recipe_key(BAKED_PACKAGES)}'} (cached)",
    ]


def test_freeze_and_restore_without_a_testbed_say_how_to_make_one(tmp_path):
    for verb in ("freeze", "restore"):
        proc = rackform("testbed", verb, "converged", "--dir", tmp_path / "tb")
        assert proc.returncode == 2, proc
        assert f"rackform testbed {verb}: no testbed in" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_the_images_are_prepared_by_the_system_python_with_the_standard_library_only(
    tmp_path, monkeypatch
):
    # scripts/setup.sh builds the images with the machine's own Python while pip fills the
    # virtualenv: `python3 -m rackform.testbed.prepare` from the checkout, isolated (-I: no
    # site-packages, so nothing of the virtualenv), reports as `rackform testbed image` does.
    import shutil
    import subprocess
    from pathlib import Path

    from rackform.testbed.apt import BAKED_PACKAGES, repo_key
    from rackform.testbed.image import recipe_key

    made = []
    for name in (
        f"base-{recipe_key()}",
        f"baked-{recipe_key(BAKED_PACKAGES)}",
        f"apt-{repo_key()}",
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "done").write_text("")
        made.append(tmp_path / name)
    python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [python, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
         " from rackform.testbed.prepare import main; sys.exit(main(['--baked']))", root],
        capture_output=True, text=True, env={"RACKFORM_TESTBED_CACHE": str(tmp_path),
                                             "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines() == [
        f"base image: {made[0]} (cached)",
        f"baked image: {made[1]} (cached)",
        f"packages: {made[2]}",
    ]


def test_up_refuses_a_baked_node_it_would_not_boot_and_a_wheelhouse_without_a_baked_node(
    tmp_path,
):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    cases = [
        (["--baked-node", "node3"], "--baked-node node3: the VMs are node1, node2"),
        (["--torch-wheelhouse", wheels], "give --baked or --baked-node"),
        (["--baked-node", "node2", "--torch-wheelhouse", wheels], "no wheel files there"),
    ]
    for args, said in cases:
        proc = rackform("testbed", "up", "--nodes", "2", "--dir", tmp_path / "tb", *args)
        assert proc.returncode == 2 and said in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert not list((tmp_path / "tb").glob("node*")), "a VM was started"


def test_up_from_a_node_image_needs_its_files_and_nothing_else_baked(tmp_path):
    # `--image DIR`: every VM from a node image `rackform image build` wrote for bare metal.
    image = tmp_path / "node-image"
    image.mkdir()
    (image / "rootfs.qcow2").write_bytes(b"")  # built with --format qcow2 only: no rootfs.raw
    proc = rackform("testbed", "up", "--dir", tmp_path / "tb", "--image", image)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"rackform testbed up: --image {image}: no rootfs.raw, vmlinuz, initrd.img there (a"
        " directory `rackform image build` wrote with the raw format, or a testbed image)"
    )
    proc = rackform("testbed", "up", "--dir", tmp_path / "tb", "--image", image, "--baked")
    assert proc.returncode == 2 and "--image is the image every VM boots" in proc.stderr
    assert not list((tmp_path / "tb").glob("node*"))
