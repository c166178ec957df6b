"""The testbed's state and blueprint (without booting anything: the e2e test boots VMs)."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.inventory import inventory
from rackform.plan.model import thaw
from rackform.testbed import lifecycle


def bed(tmp_path) -> lifecycle.Testbed:
    nodes = tuple(
        lifecycle.Node(f"node{i}", 40000 + i, f"10.77.0.{10 + i}", tuple(f"RFTB0{i}N{d}" for d in range(4)),
             str(tmp_path / f"node{i}"))
        for i in (1, 2)
    )  # fmt: skip
    return lifecycle.Testbed(
        dir=str(tmp_path),
        accel="tcg",
        accel_why="test",
        mcast="230.0.0.1:41000",
        key=str(tmp_path / "id_ed25519"),
        known_hosts=str(tmp_path / "known_hosts"),
        blueprint=str(tmp_path / "blueprint.yaml"),
        nodes=nodes,
        timings={},
    )


def test_the_blueprint_is_valid_and_compiles_to_the_vms(tmp_path):
    b = bed(tmp_path)
    path = tmp_path / "blueprint.yaml"
    path.write_text(lifecycle.blueprint_yaml(b))
    spec = compile_effective(load_effective(path))
    hosts = inventory(spec)["all"]["children"]["gpu_nodes"]["children"]["ng_vms"]["hosts"]
    assert hosts["node1"] == {
        "ansible_host": "127.0.0.1",
        "ansible_port": 40001,
        "nvme_raid_devices": ["RFTB01N0", "RFTB01N1", "RFTB01N2", "RFTB01N3"],
    }
    assert hosts["node2"]["ansible_port"] == 40002
    v = thaw(spec.group_vars)
    assert v["nccl_rdma_interfaces"] == ["priv0"] and v["smoke_train_interface"] == "priv0"
    # VMs have no GPU: the GPU roles skip them, saying why, instead of failing.
    assert v["nvidia_driver_require_gpu"] is False and v["dcgm_require_gpu"] is False
    assert spec.target.ssh_user == "root"
    assert "--private-key" in path.read_text()  # the header says how to configure it


def test_up_refuses_a_silly_node_count(tmp_path):
    with pytest.raises(lifecycle.TestbedError, match="between 1 and 16"):
        lifecycle.up(tmp_path, 0)


def test_down_without_a_testbed_does_nothing(tmp_path):
    assert lifecycle.down(tmp_path / "none") == []
    assert lifecycle.is_up(tmp_path) is False


def test_loading_a_missing_testbed_says_how_to_make_one(tmp_path):
    with pytest.raises(lifecycle.TestbedError, match="rackform testbed up"):
        lifecycle.Testbed.load(tmp_path)


def test_two_commands_on_one_testbed_do_not_interleave(tmp_path):
    with open(tmp_path / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(lifecycle.TestbedError, match="another rackform"):
            lifecycle.down(tmp_path)


def test_up_refuses_a_directory_holding_other_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    try:
        with pytest.raises(lifecycle.TestbedError, match=r"notes\.txt"):
            lifecycle.up(tmp_path, 2)
    finally:
        lifecycle.down(tmp_path)  # should the check ever break, no VM outlives the test
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_down_deletes_only_what_a_testbed_wrote(tmp_path):
    (tmp_path / "node1").mkdir()
    for name in ("root.qcow2", "nvme0.qcow2", "nvme0.converged.qcow2", "console.log"):
        (tmp_path / "node1" / name).write_text("")
    for name in ("testbed.json", "blueprint.yaml", "id_ed25519", "known_hosts"):
        (tmp_path / name).write_text("")
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "data").write_text("x")
    # A VM directory holding one file the testbed never names is not the testbed's.
    (tmp_path / "node2").mkdir()
    (tmp_path / "node2" / "root.qcow2").write_text("")
    (tmp_path / "node2" / "root.qcow2.bak").write_text("mine")
    assert lifecycle.down(tmp_path) == []
    assert (tmp_path / "node2" / "root.qcow2.bak").read_text() == "mine"
    for f in (tmp_path / "node2").iterdir():
        f.unlink()
    (tmp_path / "node2").rmdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]
    assert (tmp_path / "keep" / "data").read_text() == "x"
    (tmp_path / "keep" / "data").unlink()
    (tmp_path / "keep").rmdir()
    lifecycle.down(tmp_path)
    assert not tmp_path.exists()  # an emptied testbed directory goes too


@pytest.mark.parametrize("given", [False, True], ids=["base image", "--image"])
def test_every_vm_boots_the_one_image_and_restarts_from_it(tmp_path, monkeypatch, given):
    # QEMU is not started here (the e2e boots VMs): what each VM is started from is recorded.
    from rackform.testbed.image import BaseImage

    node_image = tmp_path / "node-image"
    node_image.mkdir()
    for f in ("rootfs.raw", "vmlinuz", "initrd.img"):
        (node_image / f).write_bytes(b"")
    base = tmp_path / "images" / "base"
    asked, started = [], []
    monkeypatch.setattr(
        lifecycle, "ensure_image", lambda log: asked.append("base") or BaseImage.in_dir(base)
    )
    monkeypatch.setattr(lifecycle, "choose_accel", lambda kernel, cache: ("tcg", "test"))
    monkeypatch.setattr(lifecycle.vm, "create_disks", lambda image, d: d.mkdir(parents=True))
    monkeypatch.setattr(lifecycle.vm, "stop", lambda d, grace_s: None)
    monkeypatch.setattr(
        lifecycle.vm, "start", lambda spec, image, d, accel, key: started.append((spec.name, image))
    )
    monkeypatch.setattr(
        lifecycle, "wait_all", lambda conns, timeout, alive: dict.fromkeys(conns, 1.0)
    )
    made = lifecycle.up(
        tmp_path / "tb", 3, image=node_image if given else None, log=lambda line: None
    )
    want = node_image if given else base
    assert asked == ([] if given else ["base"])  # --image builds no base image
    assert [(n, img.rootfs.parent) for n, img in started] == [
        ("node1", want), ("node2", want), ("node3", want),
    ]  # fmt: skip
    loaded = lifecycle.Testbed.load(tmp_path / "tb")
    assert Path(loaded.image) == want and made.nodes == loaded.nodes
    # A restart (reboot, power cut, restore) starts each VM from that image again.
    started.clear()
    lifecycle._restart(loaded, ["node3", "node1"], lambda d: None)
    assert [(n, img.rootfs.parent) for n, img in started] == [("node1", want), ("node3", want)]


def test_a_testbed_whose_state_names_each_vms_image_still_loads(tmp_path):
    # Testbeds brought up before every VM booted the one image recorded each VM's image too.
    import json
    from dataclasses import asdict

    b = bed(tmp_path)
    raw = asdict(b)
    for n in raw["nodes"]:
        n["image"] = "/cache/testbed/base-0123"
    (tmp_path / lifecycle.STATE).write_text(json.dumps(raw))
    assert lifecycle.Testbed.load(tmp_path) == b
