"""The shared tier's host checks (validators/shared_checks.py, run by validators.hostcheck): the
read rate against what the GPUs consume, and every node of a run seeing every other node's file.
Real files and real processes here; the VM e2e runs them on a real NFS mount
(tests/e2e/test_configure_vms.py)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from validators import hostcheck, shared_checks
from validators.report import FAIL, NOT_RUN, PASS

ROOT = Path(__file__).resolve().parents[2]


def shard(path: Path, mb: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(1 << 20) * mb)


def test_dataset_files_are_read_and_measured_against_the_need(tmp_path):
    for i in range(3):
        shard(tmp_path / "datasets" / f"tokens-{i:03d}.bin", 8)
    c = shared_checks.read_check(str(tmp_path), str(tmp_path / "datasets"), 64, 0.001, 30, "n1")
    assert c.status == PASS and c.measured > 0.001, c
    assert "24 MiB of 3 dataset file(s)" in c.detail and "cached pages dropped" in c.detail
    # Nothing was written: the datasets are read, never touched.
    assert not (tmp_path / ".rackform").exists()


def test_a_need_no_disk_can_meet_fails_with_both_figures(tmp_path):
    shard(tmp_path / "datasets" / "a.bin", 20)
    c = shared_checks.read_check(str(tmp_path), str(tmp_path / "datasets"), 16, 1e6, 30, "n1")
    assert c.status == FAIL and c.expected == 1e6 and 0 < c.measured < 1e6


def test_without_datasets_a_probe_is_written_once_and_read(tmp_path):
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "README").write_text("tiny")
    c = shared_checks.read_check(str(tmp_path), str(tmp_path / "datasets"), 16, None, 30, "n-1")
    # No figure to compare with: not run, but the figure is shown.
    assert c.status == NOT_RUN and c.measured > 0 and "a probe file" in c.detail
    probe = tmp_path / ".rackform" / "n-1" / "read-probe"
    assert probe.stat().st_size == 16 << 20
    before = probe.stat().st_mtime_ns
    shared_checks.read_check(str(tmp_path), None, 16, None, 30, "n-1")
    assert probe.stat().st_mtime_ns == before  # kept, not written on every run


def test_the_read_is_bounded_in_time(tmp_path):
    shard(tmp_path / "datasets" / "big.bin", 64)
    c = shared_checks.read_check(str(tmp_path), str(tmp_path / "datasets"), 64, None, 0.0, "n1")
    # A deadline of 0 s stops after the first block: the figure is what was read by then.
    assert c.measured > 0 and "8 MiB" in c.detail


def test_every_node_sees_every_other_nodes_file(tmp_path):
    peers = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
    with ThreadPoolExecutor(3) as pool:
        checks = list(
            pool.map(
                lambda n: shared_checks.visible_check(
                    str(tmp_path), "run-ab12", n, peers, 20, 0.05
                ),
                peers,
            )
        )
    assert [c.status for c in checks] == [PASS] * 3, checks
    assert checks[0].measured == "3/3 nodes"


def test_a_node_that_sees_a_peers_old_file_is_not_fooled(tmp_path):
    d = tmp_path / ".rackform" / "validate" / "run-ab12"
    d.mkdir(parents=True)
    # Left by an earlier run with the same id, an hour ago; and one naming another node.
    old = {"node": "n2", "run": "run-ab12", "host": "n2", "time": time.time() - 3600}
    for peer, token in (("n2", old), ("n3", {**old, "node": "n9", "time": time.time()})):
        (d / peer).mkdir()
        (d / peer / "token").write_text(json.dumps(token))
    c = shared_checks.visible_check(str(tmp_path), "run-ab12", "n1", ["n1", "n2", "n3"], 0.3, 0.05)
    assert c.status == FAIL and c.measured == "1/3 nodes", c
    assert "never showed the files that n2, n3 wrote there in 0.3 s" in c.detail
    assert "not the same file system" in c.detail


def test_two_nodes_on_different_disks_both_fail(tmp_path):
    # Two "nodes" whose mount points are different directories: each writes, neither sees.
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    with ThreadPoolExecutor(2) as pool:
        ca, cb = pool.map(
            lambda x: shared_checks.visible_check(str(x[0]), "r1", x[1], ["n1", "n2"], 0.5, 0.05),
            [(a, "n1"), (b, "n2")],
        )
    assert ca.status == cb.status == FAIL
    assert "n2 wrote" in ca.detail and "n1 wrote" in cb.detail


def test_without_peers_the_visibility_check_says_why(tmp_path):
    c = shared_checks.visible_check(str(tmp_path), "", "n1", [], 1)
    assert c.status == NOT_RUN and "no run id" in c.detail


def host(argv: list[str]) -> tuple[int, dict]:
    out = subprocess.run(
        [sys.executable, "-m", "validators.hostcheck", "--json", "/dev/stdout", "--no-table",
         "--storage-probe-mb", "0", *argv],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    return out.returncode, json.loads(out.stdout)


def by_name(doc: dict) -> dict[str, dict]:
    return {c["name"]: c for c in doc["checks"]}


def test_an_unmounted_tier_fails_and_nothing_is_measured_on_the_root_disk(tmp_path):
    plain = tmp_path / "shared"
    plain.mkdir()
    rc, doc = host(["--node", "n1", "--shared-mount", str(plain), "--shared-run", "r",
                    "--shared-peers", "n1,n2"])  # fmt: skip
    c = by_name(doc)
    assert rc == 1 and c["shared_mount"]["status"] == FAIL
    assert "is a plain directory, not mounted" in c["shared_mount"]["detail"]
    assert c["shared_read"]["status"] == c["shared_visible"]["status"] == NOT_RUN
    assert list(plain.iterdir()) == []  # no probe, no token written on the root disk


def test_no_shared_tier_no_shared_checks(tmp_path):
    _, doc = host(["--node", "n1"])
    assert not [c for c in doc["checks"] if c["name"].startswith("shared_")]


def test_a_mounted_tier_runs_all_three(tmp_path, monkeypatch):
    # This machine cannot mount a file system: the mount table's answer is the seam here. The
    # e2e mounts a real NFS export on the VMs.
    monkeypatch.setattr(hostcheck, "is_mount_point", lambda d, *a: d == str(tmp_path))
    shard(tmp_path / "datasets" / "t.bin", 16)
    args = argparse.Namespace(
        shared_mount=str(tmp_path), node="n1", shared_read_dir=str(tmp_path / "datasets"),
        shared_read_mb=16, shared_read_min_gbps=0.0001, shared_read_timeout_s=30,
        shared_run="r1", shared_peers="n1", shared_wait_s=1,
    )  # fmt: skip
    checks = hostcheck.shared_checks_for(args)
    assert [(c.name, c.status) for c in checks] == [
        ("shared_mount", PASS),
        ("shared_read", PASS),
        ("shared_visible", PASS),
    ]


def test_the_read_can_be_turned_off(tmp_path):
    c = shared_checks.read_check(str(tmp_path), None, 0, 1.0, 30, "n1")
    assert c.status == NOT_RUN and "disabled" in c.detail


def test_the_directories_it_makes_take_every_nodes_files(tmp_path):
    # Under root_squash each node's root is nobody on the tier: a 0755 directory one node made
    # would refuse the others' files. Each level is made 1777, whatever the umask.
    old = os.umask(0o022)
    try:
        shared_checks.visible_check(str(tmp_path), "r9", "n1", ["n1"], 0)
    finally:
        os.umask(old)
    for d in (tmp_path / ".rackform", tmp_path / ".rackform" / "validate",
              tmp_path / ".rackform" / "validate" / "r9"):  # fmt: skip
        assert d.stat().st_mode & 0o7777 == 0o1777, d
    # ...and the node's own file goes into a directory of its own, never straight into one
    # another node made (under root_squash and protected_regular root could not open it).
    mine = tmp_path / ".rackform" / "validate" / "r9" / "n1"
    assert mine.is_dir() and json.loads((mine / "token").read_text())["node"] == "n1"
