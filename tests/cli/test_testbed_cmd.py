"""`rackform testbed` as a user runs it, without booting (the e2e test boots VMs)."""

from __future__ import annotations

from conftest import rackform


def test_down_with_no_testbed_says_so(tmp_path):
    proc = rackform("testbed", "down", "--dir", tmp_path / "tb")
    assert proc.returncode == 0 and "no testbed VMs were running" in proc.stdout


def test_up_refuses_an_impossible_node_count(tmp_path):
    proc = rackform("testbed", "up", "--nodes", "0", "--dir", tmp_path / "tb")
    assert proc.returncode == 2 and "--nodes" in proc.stderr
    assert not (tmp_path / "tb").exists()
