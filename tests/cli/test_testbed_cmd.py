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
