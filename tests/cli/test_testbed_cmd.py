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

    from rackform.testbed.apt import repo_key
    from rackform.testbed.image import recipe_key

    made = []
    for name in (f"base-{recipe_key()}", f"apt-{repo_key()}"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "done").write_text("")
        made.append(tmp_path / name)
    python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [python, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
         " from rackform.testbed.prepare import main; sys.exit(main([]))", root],
        capture_output=True, text=True, env={"RACKFORM_TESTBED_CACHE": str(tmp_path),
                                             "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines() == [
        f"base image: {made[0]} (cached)",
        f"packages: {made[1]}",
    ]


def test_up_from_a_node_image_needs_its_files(tmp_path):
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
    assert not list((tmp_path / "tb").glob("node*"))
