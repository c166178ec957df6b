"""The read-only sysfs probes of nvidia_driver and nccl_rdma, on directory trees laid out like
/sys and /proc (this machine has no GPU, EFA or RDMA device to read)."""

from __future__ import annotations

from pathlib import Path

from gpu_collection import module

gpu_probe = module("nvidia_driver_probe")
fabric_probe = module("nccl_rdma_probe")


def _pci(root: Path, addr: str, vendor: str, device: str, cls: str) -> None:
    d = root / "bus" / "pci" / "devices" / addr
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "device").write_text(device + "\n")
    (d / "class").write_text(cls + "\n")


def test_gpus_and_nvswitches_are_told_apart_from_other_nvidia_functions(tmp_path):
    sys_root = tmp_path / "sys"
    _pci(sys_root, "0000:18:00.0", "0x10de", "0x2330", "0x030200")  # H100 SXM: 3D controller
    _pci(sys_root, "0000:2a:00.0", "0x10de", "0x2330", "0x030200")
    _pci(sys_root, "0000:18:00.1", "0x10de", "0x22a3", "0x040300")  # its audio function
    _pci(sys_root, "0000:07:00.0", "0x10de", "0x22a3", "0x068000")  # NVSwitch
    _pci(sys_root, "0000:00:04.0", "0x1af4", "0x1000", "0x020000")  # virtio-net
    got = gpu_probe.probe(str(sys_root), str(tmp_path / "proc"), str(tmp_path))
    assert [g["address"] for g in got["gpus"]] == ["0000:18:00.0", "0000:2a:00.0"]
    assert got["nvswitches"] == ["0000:07:00.0"]
    assert got["loaded_version"] == "" and got["nouveau_loaded"] is False
    assert got["installed"] == []  # nothing in dpkg's database or the library directories


def test_the_loaded_driver_version_and_nouveau(tmp_path):
    proc = tmp_path / "proc" / "driver" / "nvidia"
    proc.mkdir(parents=True)
    (proc / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    (tmp_path / "sys" / "module" / "nouveau").mkdir(parents=True)
    got = gpu_probe.probe(str(tmp_path / "sys"), str(tmp_path / "proc"), str(tmp_path))
    assert got["loaded_version"] == "550.90.07" and got["nouveau_loaded"] is True
    assert got["gpus"] == []


def test_a_machine_without_gpus_has_none(tmp_path):
    _pci(tmp_path / "sys", "0000:00:02.0", "0x1234", "0x1111", "0x030000")  # QEMU VGA
    got = gpu_probe.probe(str(tmp_path / "sys"), str(tmp_path / "proc"), str(tmp_path))
    assert got["gpus"] == [] and got["installed"] == []


def test_fabric_probe_finds_efa_functions_rdma_link_layers_and_interfaces(tmp_path):
    sys_root = tmp_path / "sys"
    _pci(sys_root, "0000:10:00.0", "0x1d0f", "0xefa1", "0x020000")  # EFA
    _pci(sys_root, "0000:11:00.0", "0x1d0f", "0xec20", "0x020000")  # ENA, not EFA
    for name, layer, netdev in (("mlx5_0", "InfiniBand", "ib0"), ("mlx5_1", "Ethernet", "ens1")):
        d = sys_root / "class" / "infiniband" / name
        (d / "ports" / "1").mkdir(parents=True)
        (d / "ports" / "1" / "link_layer").write_text(layer + "\n")
        (d / "device" / "net" / netdev).mkdir(parents=True)
    for iface in ("lo", "ib0", "ens1"):
        (sys_root / "class" / "net" / iface).mkdir(parents=True)
    got = fabric_probe.probe(str(sys_root))
    assert got["efa_pci"] == ["0000:10:00.0"]
    assert got["rdma"] == [
        {"name": "mlx5_0", "link_layer": "InfiniBand", "netdevs": ["ib0"]},
        {"name": "mlx5_1", "link_layer": "Ethernet", "netdevs": ["ens1"]},
    ]
    assert got["interfaces"] == ["ens1", "ib0", "lo"]


def test_fabric_probe_on_a_plain_host(tmp_path):
    (tmp_path / "sys" / "class" / "net" / "eth0").mkdir(parents=True)
    assert fabric_probe.probe(str(tmp_path / "sys")) == {
        "efa_pci": [],
        "rdma": [],
        "interfaces": ["eth0"],
    }
