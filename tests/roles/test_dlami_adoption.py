"""The roles on the AWS Deep Learning AMI, through their probes' pure functions, with inputs as
the DLAMI presents them (its /opt/dlami/nvme: ext4 on LVM vg.01/lv_ephemeral striped over every
instance-store drive, made by dlami-nvme.service; its own NVIDIA driver) and as a plain Ubuntu
host does (no such mount, no driver)."""

from __future__ import annotations

import pytest
from gpu_collection import module, module_util

from rackform.catalog.raid import role_table

# nvme_raid_probe's logic, in the module_utils it imports.
block_stack = module_util("block_stack")
preexisting_mount = module_util("preexisting_mount")
nvme_raid_plan = module_util("nvme_raid_plan")
gpu = module("nvidia_driver_probe")
LEVELS = role_table()
MOUNT = "/opt/dlami/nvme"
INSTANCE_STORE = "Amazon EC2 NVMe Instance Storage"
EBS = "Amazon Elastic Block Store"


def drive(i: int, *, model=INSTANCE_STORE, holders=(), in_use="", sigs=()) -> dict:
    return {
        "name": f"nvme{i}n1",
        "path": f"/dev/nvme{i}n1",
        "serial": f"AWS{i:04d}",
        "model": model,
        "by_id": f"/dev/disk/by-id/nvme-{model.replace(' ', '_')}_AWS{i:04d}",
        "signatures": list(sigs),
        "in_use": in_use,
        "partitions": [],
        "holders": list(holders),
    }


PV = {"type": "LVM2_member", "uuid": "pv-uuid", "label": "", "offset": "0x218"}


def dlami_host(n: int = 8) -> list[dict]:
    """p5.48xlarge on the DLAMI: the root EBS volume, and n instance-store drives that are PVs
    of vg.01, held by its striped LV (dm-0)."""
    root = drive(0, model=EBS, in_use="mounted or swap: /dev/nvme0n1p1")
    return [root] + [
        drive(i, holders=["dm-0"], in_use="held by /dev/dm-0", sigs=[PV]) for i in range(1, n + 1)
    ]


def lvm_mount(members, *, stripes=None, layout="striped") -> dict:
    return {
        "mount": MOUNT, "source": "/dev/mapper/vg.01-lv_ephemeral", "fstype": "ext4",
        "majmin": "253:0", "root": "/", "device": "dm-0", "dm_name": "vg.01-lv_ephemeral",
        "kind": "lvm", "vg": "vg.01", "lv": "lv_ephemeral", "layout": layout,
        "stripes": len(members) if stripes is None else stripes, "chunk_kib": 64,
        "members": list(members), "units": ["dlami-nvme.service"],
    }  # fmt: skip


def plan(drives, pre=None, action="adopt", allow_wipe=False, wanted=(), level=0):
    return nvme_raid_plan.plan(
        drives, [], wanted=list(wanted), name="checkpoints", level=level, levels=LEVELS,
        allow_wipe=allow_wipe, preexisting=pre, preexisting_action=action,
    )  # fmt: skip


NVMES = [f"nvme{i}n1" for i in range(1, 9)]


def test_adopt_uses_the_dlami_volume_and_builds_no_array():
    r = plan(dlami_host(), lvm_mount(NVMES))
    assert r["problems"] == []
    assert r["action"] == "adopt" and r["wipe"] == [] and r["release"] == []
    assert r["members"] == [f"/dev/{n}" for n in NVMES]
    # Same drives, same stripe width as the rackform array: expectations unchanged.
    assert (
        r["data_disks"]
        == 8
        == plan(
            [drive(0, model=EBS, in_use="mounted or swap: /dev/nvme0n1p1")]
            + [drive(i) for i in range(1, 9)]
        )["data_disks"]
    )


def test_adopt_refuses_a_volume_that_leaves_a_drive_out():
    host = dlami_host()
    host[8] = drive(8)  # not in the VG: free
    r = plan(host, lvm_mount(NVMES[:7]))
    (p,) = r["problems"]
    assert "cannot adopt /opt/dlami/nvme" in p and "leaves /dev/nvme8n1" in p
    assert "nvme_raid_preexisting_action: replace" in p and "plain Ubuntu image" in p


def test_adopt_refuses_a_linear_concatenation():
    r = plan(dlami_host(4), lvm_mount(NVMES[:4], layout="linear", stripes=1))
    (p,) = r["problems"]
    assert "not striped over its 4 drives (linear)" in p


def test_adopt_refuses_a_striped_volume_for_another_raid_level():
    r = plan(dlami_host(4), lvm_mount(NVMES[:4]), level=10)
    assert any("not RAID 10" in p for p in r["problems"])


def test_adopt_refuses_a_preexisting_mount_on_ebs_and_says_why():
    host = [
        drive(0, model=EBS, in_use="mounted or swap: /dev/nvme0n1p1"),
        drive(1, model=EBS, in_use="mounted or swap: /dev/nvme1n1"),
        drive(2),
    ]
    pre = {"mount": MOUNT, "source": "/dev/nvme1n1", "fstype": "xfs", "device": "nvme1n1",
           "kind": "disk", "layout": "disk", "members": ["nvme1n1"], "units": []}  # fmt: skip
    r = plan(host, pre)
    (p,) = r["problems"]
    assert "cannot adopt /opt/dlami/nvme (xfs on /dev/nvme1n1)" in p
    assert "Amazon Elastic Block Store" in p and "not the instance-store NVMe drives" in p
    assert 'nvme_raid_preexisting_mount to ""' in p
    # Nor is it replaced (erased), even with allow_wipe.
    r = plan(host, pre, action="replace", allow_wipe=True)
    assert r["problems"] and "will not replace" in r["problems"][0]
    assert r["replace"] is False and r["wipe"] == [] and r["release"] == []


def test_replace_without_allow_wipe_names_the_mount_the_drives_and_both_fixes():
    r = plan(dlami_host(), lvm_mount(NVMES), action="replace")
    (p,) = r["problems"]
    assert "/opt/dlami/nvme (ext4 on LVM vg.01/lv_ephemeral, striped over 8 drive(s))" in p
    for i in range(1, 9):
        assert f"/dev/nvme{i}n1 (serial AWS{i:04d}" in p
    assert "nvme_raid_allow_wipe: true" in p and "nvme_raid_preexisting_action: adopt" in p
    assert r["replace"] is False and r["action"] == "none" and r["wipe"] == []


def test_replace_with_allow_wipe_releases_the_drives_and_lists_them_for_the_array():
    r = plan(dlami_host(), lvm_mount(NVMES), action="replace", allow_wipe=True)
    assert r["problems"] == []
    assert r["replace"] is True
    assert r["release"] == ["vgchange", "--activate", "n", "vg.01"]
    assert r["action"] == "create"
    expected = [f"/dev/{n}" for n in NVMES]
    assert r["members"] == expected and r["wipe"] == expected  # their PV labels are erased
    assert "/dev/nvme0n1" not in r["members"]  # the root EBS volume never
    assert r["preexisting"]["units"] == ["dlami-nvme.service"]


def test_replace_of_an_md_raid0_stops_the_array():
    member = {"type": "linux_raid_member", "label": "ip-10-0-0-1:0"}
    host = [drive(i, holders=["md0"], in_use="held by /dev/md0", sigs=[member]) for i in (1, 2)]
    pre = {"mount": MOUNT, "source": "/dev/md0", "fstype": "xfs", "device": "md0", "kind": "md",
           "layout": "raid0", "members": ["nvme1n1", "nvme2n1"], "units": []}  # fmt: skip
    adopted = plan(host, pre)
    assert adopted["problems"] == [] and adopted["action"] == "adopt"
    assert adopted["data_disks"] == 2
    r = plan(host, pre, action="replace", allow_wipe=True)
    assert r["release"] == ["mdadm", "--stop", "/dev/md0"]
    assert r["members"] == ["/dev/nvme1n1", "/dev/nvme2n1"] and r["action"] == "create"


def test_drives_shared_with_something_else_are_never_taken():
    host = dlami_host(2)
    host[2]["holders"] = ["dm-0", "dm-1"]
    r = plan(host, lvm_mount(NVMES[:2]), action="replace", allow_wipe=True)
    assert r["problems"] and "also used by something else" in r["problems"][0]
    assert r["replace"] is False and r["wipe"] == []


def test_a_plain_ubuntu_host_behaves_as_before():
    # No mount at /opt/dlami/nvme (the probe passes None): the array path, whatever the action.
    host = [drive(0, model=EBS, in_use="mounted or swap: /dev/nvme0n1p1")] + [
        drive(i) for i in (1, 2)
    ]
    before = nvme_raid_plan.plan(host, [], wanted=[], name="checkpoints", level=0, levels=LEVELS,
                       allow_wipe=False)  # fmt: skip
    for action in ("adopt", "replace"):
        r = plan(host, None, action=action)
        assert r == before
        assert r["action"] == "create" and r["members"] == ["/dev/nvme1n1", "/dev/nvme2n1"]
        assert r["replace"] is False and r["preexisting"] == {}


def test_the_mount_table_and_sysfs_read_as_the_dlami_presents_them(tmp_path):
    mountinfo = (
        "29 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw\n"
        "412 29 253:0 / /opt/dlami/nvme rw,noatime shared:220 - ext4"
        " /dev/mapper/vg.01-lv_ephemeral rw,nodiratime\n"
        "500 29 253:0 / /mnt/my\\040ckpt rw shared:221 - ext4 /dev/mapper/vg.01-lv_ephemeral rw\n"
    )
    mounts = preexisting_mount.parse_mountinfo(mountinfo)
    found = preexisting_mount.find_mount(mounts, "/opt/dlami/nvme/")
    assert found["majmin"] == "253:0" and found["fstype"] == "ext4"
    assert preexisting_mount.find_mount(mounts, "/mnt/my ckpt")["mount"] == "/mnt/my ckpt"
    assert preexisting_mount.find_mount(mounts, "/opt/elsewhere") == {}

    sys_root = tmp_path / "sys"
    dm = sys_root / "devices" / "virtual" / "block" / "dm-0"
    (dm / "dm").mkdir(parents=True)
    (dm / "dm" / "name").write_text("vg.01-lv_ephemeral\n")
    (dm / "dm" / "uuid").write_text("LVM-abcdef\n")
    (dm / "slaves").mkdir()
    for n in ("nvme2n1", "nvme1n1"):
        disk = sys_root / "devices" / "pci" / n
        disk.mkdir(parents=True)
        (dm / "slaves" / n).symlink_to(disk)
    (sys_root / "dev" / "block").mkdir(parents=True)
    (sys_root / "dev" / "block" / "253:0").symlink_to(dm)
    table = "0 15000000000 striped 2 128 259:2 2048 259:3 2048\n"
    stack = block_stack.block_stack("253:0", str(sys_root), dm_table=lambda name: table)
    assert stack["kind"] == "lvm" and (stack["vg"], stack["lv"]) == ("vg.01", "lv_ephemeral")
    assert stack["layout"] == "striped" and stack["stripes"] == 2 and stack["chunk_kib"] == 64
    assert stack["members"] == ["nvme1n1", "nvme2n1"]


def test_dm_tables_and_lvm_names():
    assert block_stack.parse_dm_table("0 100 linear 259:1 2048\n")["layout"] == "linear"
    assert block_stack.parse_dm_table("0 10 linear 259:1 0\n10 10 linear 259:2 0\n")["stripes"] == 0
    assert block_stack.lvm_names("my--vg-lv--a") == ("my-vg", "lv-a")


def test_present_units(tmp_path):
    (tmp_path / "etc" / "systemd" / "system").mkdir(parents=True)
    (tmp_path / "etc" / "systemd" / "system" / "dlami-nvme.service").write_text("[Unit]\n")
    units = ["dlami-nvme.service", "other.service"]
    assert preexisting_mount.present_units(units, str(tmp_path)) == ["dlami-nvme.service"]


# nvidia_driver -----------------------------------------------------------------------------

DLAMI_DPKG = """Package: nvidia-driver-580-open
Status: install ok installed
Version: 580.95.05-0ubuntu1

Package: libnvidia-compute-580
Status: install ok installed
Version: 580.95.05-0ubuntu1

Package: nvidia-driver-550
Status: deinstall ok config-files
Version: 550.90.07-0ubuntu1

Package: vim
Status: install ok installed
Version: 2:9.0
"""


def test_installed_drivers_are_read_from_dpkg_and_the_library(tmp_path):
    (tmp_path / "var" / "lib" / "dpkg").mkdir(parents=True)
    (tmp_path / "var" / "lib" / "dpkg" / "status").write_text(DLAMI_DPKG)
    lib = tmp_path / "usr" / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    for name in ("libnvidia-ml.so.580.95.05", "libnvidia-ml.so.1", "libnvidia-ml.so"):
        (lib / name).touch()
    got = gpu.probe(str(tmp_path / "sys"), str(tmp_path / "proc"), str(tmp_path))
    assert {(d["branch"], d["version"], d["seen"]) for d in got["installed"]} == {
        ("580", "580.95.05", "nvidia-driver-580-open"),
        ("580", "580.95.05", "libnvidia-compute-580"),
        ("580", "580.95.05", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05"),
    }


DLAMI_580 = [{"branch": "580", "version": "580.95.05", "seen": "nvidia-driver-580-open"}]


def test_the_same_branch_preinstalled_is_adopted_when_asked():
    assert gpu.decide("580", "580.95.05", DLAMI_580, True)["decision"] == "adopt"
    assert gpu.decide("580-open", "", DLAMI_580, True)["decision"] == "adopt"
    # Not asked (a plain host the role installed itself): install, as before (apt: no change).
    assert gpu.decide("580", "580.95.05", DLAMI_580, False)["decision"] == "install"


@pytest.mark.parametrize("adopt", [True, False])
def test_another_branch_installed_or_loaded_is_refused_naming_both_and_the_fix(adopt):
    r = gpu.decide("550", "", DLAMI_580, adopt)
    assert r["decision"] == "refuse"
    p = r["problem"]
    assert "branch 580" in p and "nvidia_driver_branch is 550" in p
    assert "580.95.05 (nvidia-driver-580-open)" in p
    assert 'set software.driver_branch to "580"' in p.replace("Set", "set")
    assert "plain Ubuntu image" in p
    # Loaded only (a runfile install that left no package behind): refused as well.
    assert gpu.decide("550", "580.95.05", [], adopt)["decision"] == "refuse"


def test_no_driver_installs():
    assert gpu.decide("550", "", [], True) == {
        "decision": "install",
        "installed_branches": [],
        "problem": "",
    }
