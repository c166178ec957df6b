"""nvme_raid's probe: the decisions it makes from what a host has (pure), and how it reads
sysfs and /dev/disk/by-id (on a directory tree laid out like them). The module's real run
against emulated NVMe drives is in tests/e2e/test_configure_vms.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from gpu_collection import ROLES_DIR, module, module_util

from rackform.blueprint.schema.sections import CheckpointStorage
from rackform.catalog.raid import load_raid_levels, role_table

# The probe's logic, in the module_utils nvme_raid_probe imports.
probe = module("nvme_raid_probe")  # its DOCUMENTATION
nvme_drives = module_util("nvme_drives")
md_arrays = module_util("md_arrays")
nvme_raid_plan = module_util("nvme_raid_plan")


def drive(i: int, *, sigs=(), in_use="", model="QEMU NVMe Ctrl") -> dict:
    serial = f"SER{i}"
    return {
        "name": f"nvme{i}n1",
        "path": f"/dev/nvme{i}n1",
        "serial": serial,
        "model": model,
        "by_id": f"/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_{serial}",
        "signatures": list(sigs),
        "in_use": in_use,
        "partitions": [],
        "holders": [],
    }


EXT4 = {"type": "ext4", "uuid": "1111-2222", "label": "keepme", "offset": "0x438"}
GPT = {"type": "gpt", "uuid": "", "label": "", "offset": "0x200"}


LEVELS = role_table()  # what rackform passes the role (nvme_raid_levels)


def plan(drives, arrays=(), wanted=(), level=0, allow_wipe=False):
    return nvme_raid_plan.plan(
        list(drives), list(arrays), wanted=list(wanted), name="checkpoints", level=level,
        levels=LEVELS, allow_wipe=allow_wipe,
    )  # fmt: skip


def test_blank_drives_are_all_used_when_none_are_listed():
    r = plan([drive(i) for i in range(4)])
    assert r["action"] == "create" and not r["problems"]
    assert r["members"] == [f"/dev/nvme{i}n1" for i in range(4)]
    assert r["data_disks"] == 4 and r["wipe"] == []


def test_a_drive_holding_a_filesystem_is_refused_with_its_name_and_contents():
    r = plan([drive(0), drive(1, sigs=[EXT4]), drive(2), drive(3)])
    assert len(r["problems"]) == 1
    msg = r["problems"][0]
    for part in ("/dev/nvme1n1", "SER1", "nvme-QEMU_NVMe_Ctrl_SER1", "ext4 filesystem", "keepme"):
        assert part in msg
    assert "nvme_raid_allow_wipe" in msg and r["wipe"] == []


def test_allow_wipe_lists_the_drive_to_erase_instead():
    r = plan([drive(0), drive(1, sigs=[EXT4, GPT])], allow_wipe=True)
    assert not r["problems"] and r["wipe"] == ["/dev/nvme1n1"] and r["action"] == "create"


def test_a_drive_in_use_is_never_used_even_with_allow_wipe():
    busy = drive(1, sigs=[EXT4], in_use="mounted or swap: /dev/nvme1n1")
    r = plan([drive(0), busy], wanted=["SER0", "SER1"], allow_wipe=True)
    assert any("in use" in p and "/dev/nvme1n1" in p for p in r["problems"])
    assert r["wipe"] == []


def test_auto_selection_skips_drives_in_use_and_ebs_volumes():
    root = drive(0, in_use="mounted or swap: /dev/nvme0n1p1")
    ebs = drive(1, model="Amazon Elastic Block Store")
    r = plan([root, ebs, drive(2), drive(3)])
    assert r["members"] == ["/dev/nvme2n1", "/dev/nvme3n1"] and not r["problems"]


def test_listed_drives_resolve_by_serial_by_id_name_and_path_in_the_given_order():
    drives = [drive(i) for i in range(3)]
    r = plan(drives, wanted=["/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_SER2", "SER0",
                             "nvme-QEMU_NVMe_Ctrl_SER1"])  # fmt: skip
    assert r["members"] == ["/dev/nvme2n1", "/dev/nvme0n1", "/dev/nvme1n1"]


def test_a_listed_drive_that_is_not_there_names_the_drives_that_are():
    r = plan([drive(0), drive(1)], wanted=["SER0", "NOPE"])
    assert any("'NOPE'" in p and "SER1 (/dev/nvme1n1)" in p for p in r["problems"])


def test_no_drive_at_all_is_a_problem_not_an_empty_array():
    r = plan([drive(0, in_use="mounted or swap: /dev/nvme0n1")])
    assert r["problems"] and "no unused NVMe drive" in r["problems"][0]


def test_too_few_drives_for_the_level():
    r = plan([drive(0), drive(1)], level=5)
    assert any("RAID 5 needs at least 3" in p for p in r["problems"])


ARRAY = {
    "device": "/dev/md127",
    "name": "node1:checkpoints",
    "uuid": "a:b:c:d",
    "level": "raid0",
    "members": ["/dev/nvme0n1", "/dev/nvme1n1"],
    "state": "clean",
}


def test_an_active_array_means_nothing_to_build():
    member = {"type": "linux_raid_member", "label": "node1:checkpoints"}
    r = plan([drive(0, sigs=[member]), drive(1, sigs=[member])], arrays=[ARRAY])
    assert r["action"] == "none" and not r["problems"]
    assert r["members"] == ARRAY["members"] and r["data_disks"] == 2


def test_an_active_array_of_another_level_or_other_drives_is_reported_not_rebuilt():
    r = plan([drive(0), drive(1), drive(2)], arrays=[ARRAY], level=1)
    assert any("is raid0, not raid1" in p for p in r["problems"])
    r = plan([drive(0), drive(1), drive(2)], arrays=[ARRAY], wanted=["SER0", "SER2"])
    assert any("does not reshape" in p for p in r["problems"])


def test_an_array_of_another_name_is_not_ours():
    other = {**ARRAY, "name": "node1:scratch"}
    r = plan([drive(2), drive(3)], arrays=[other])
    assert r["action"] == "create" and r["members"] == ["/dev/nvme2n1", "/dev/nvme3n1"]


def test_our_superblocks_on_stopped_drives_are_assembled_not_recreated():
    member = {"type": "linux_raid_member", "label": "node1:checkpoints"}
    r = plan([drive(0, sigs=[member]), drive(1, sigs=[member])])
    assert r["action"] == "assemble" and not r["problems"]


def test_a_foreign_raid_superblock_is_refused():
    member = {"type": "linux_raid_member", "label": "oldhost:data"}
    r = plan([drive(0, sigs=[member]), drive(1)])
    assert r["action"] == "create"
    assert any("md RAID member superblock" in p and "oldhost:data" in p for p in r["problems"])


@pytest.mark.parametrize(
    ("level", "n", "data"), [(0, 4, 4), (1, 2, 1), (5, 4, 3), (6, 6, 4), (10, 4, 2), (10, 2, 1)]
)
def test_data_disks_per_level(level, n, data):
    assert md_arrays.data_disks(LEVELS, level, n) == data


@pytest.mark.parametrize("level", sorted(load_raid_levels()))
@pytest.mark.parametrize("n", range(0, 9))
def test_the_probe_and_the_catalog_count_data_drives_alike(level, n):
    assert md_arrays.data_disks(LEVELS, level, n) == load_raid_levels()[level].data_drives(n)


def test_raid10_on_two_drives_is_accepted_as_md_accepts_it():
    r = plan([drive(0), drive(1)], level=10)
    assert r["problems"] == [] and r["data_disks"] == 1
    assert any("RAID 10 needs at least 2" in p for p in plan([drive(0)], level=10)["problems"])


def test_the_roles_default_table_and_levels_are_the_catalogs():
    # The role's default serves playbooks that use it on their own; rackform always passes
    # the catalog's table. They must be the same table, and the levels the role's argument
    # spec and the probe module accept the catalog's levels (the schema's are derived from it).
    role = ROLES_DIR / "nvme_raid"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())["nvme_raid_levels"]
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert defaults == options["nvme_raid_levels"]["default"] == LEVELS
    catalog = sorted(load_raid_levels())
    assert options["nvme_raid_level"]["choices"] == catalog
    assert yaml.safe_load(probe.DOCUMENTATION)["options"]["level"]["choices"] == catalog
    assert [int(k) for k in LEVELS] == catalog


def test_the_schema_accepts_exactly_the_catalogs_levels():
    field = CheckpointStorage.model_json_schema()["properties"]["raid_level"]
    assert field["enum"] == sorted(load_raid_levels())


def test_describe_names_each_kind_once():
    text = nvme_drives.describe([EXT4, GPT, GPT, {"type": "swap"}, {"type": "linux_raid_member"}])
    assert text.count("gpt partition table") == 1
    assert "an ext4 filesystem (uuid 1111-2222, label keepme)" in text
    assert "a swap area" in text and "md RAID member superblock" in text


def _sysfs(tmp: Path) -> Path:
    block = tmp / "sys" / "block"
    for name, serial in (("nvme0n1", "B"), ("nvme1n1", "A")):
        d = block / name
        (d / "device").mkdir(parents=True)
        (d / "holders").mkdir()
        (d / "size").write_text("2097152\n")
        (d / "device" / "serial").write_text(f"{serial}          \n")
        (d / "device" / "model").write_text("QEMU NVMe Ctrl      \n")
    (block / "nvme0n1" / "nvme0n1p1").mkdir()
    (block / "nvme0n1" / "holders" / "md127").mkdir()
    (block / "nvme0c0n1").mkdir()  # a multipath path device: not a drive of its own
    (block / "vda").mkdir()
    return tmp / "sys"


def test_namespaces_reads_serial_model_size_partitions_and_holders(tmp_path):
    got = {d["name"]: d for d in nvme_drives.namespaces(str(_sysfs(tmp_path)))}
    assert sorted(got) == ["nvme0n1", "nvme1n1"]
    assert got["nvme0n1"]["serial"] == "B" and got["nvme0n1"]["model"] == "QEMU NVMe Ctrl"
    assert got["nvme0n1"]["size_bytes"] == 2097152 * 512
    assert got["nvme0n1"]["partitions"] == ["nvme0n1p1"]
    assert got["nvme0n1"]["holders"] == ["md127"] and got["nvme1n1"]["holders"] == []


def test_by_id_names_prefer_the_model_serial_link(tmp_path):
    d = tmp_path / "dev" / "disk" / "by-id"
    d.mkdir(parents=True)
    target = tmp_path / "dev" / "nvme0n1"
    target.touch()
    for link in (
        "nvme-QEMU_NVMe_Ctrl_A",
        "nvme-QEMU_NVMe_Ctrl_A_1",
        "nvme-nvme.1b36-41",
        "nvme-eui.01",
    ):
        (d / link).symlink_to(target)
    assert nvme_drives.by_id_names(str(tmp_path / "dev")) == {
        "nvme0n1": "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_A"
    }


def test_a_broken_raid0_is_named_by_array_and_member_with_what_to_do():
    # A RAID0 member failed: md calls the array broken; the mount gives I/O errors. The probe
    # used to find the array "there" and let the role go on to fail at the mount.
    broken = {**ARRAY, "state": "broken", "faulty": ["/dev/nvme1n1"], "missing": 0}
    member = {"type": "linux_raid_member", "label": "node1:checkpoints"}
    r = plan([drive(0, sigs=[member]), drive(1, sigs=[member])], arrays=[broken])
    (p,) = r["problems"]
    assert "md array /dev/md127 (node1:checkpoints, raid0) is not healthy" in p
    assert "state broken, failed member(s) /dev/nvme1n1" in p
    assert "its data is lost" in p and "mdadm --stop" in p


def test_a_degraded_mirror_is_named_with_the_repair():
    degraded = {**ARRAY, "level": "raid1", "state": "clean", "missing": 1}
    r = plan([drive(0)], arrays=[degraded], level=1)
    assert any("1 member(s) missing" in p and "mdadm --add" in p for p in r["problems"])


def test_a_healthy_array_has_no_problem():
    healthy = {**ARRAY, "faulty": [], "missing": 0}
    assert plan([drive(0), drive(1)], arrays=[healthy])["problems"] == []
