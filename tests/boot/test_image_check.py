"""The node's check of its image at boot (rackform/boot/image_check.py) and the record the
image's build writes (rackform/boot/bake.py): the same roles hash skips the baked tags; any other
image is configured in full, with a WARNING naming both hashes."""

from __future__ import annotations

import json

from rackform.boot import bake
from rackform.boot.image_check import ImageCheck, ansible_env, check

WANT = {"roles": "sha256:" + "a" * 64, "tags": ["nvidia_driver", "nccl_rdma", "dcgm"]}


def _record(tmp_path, **fields):
    path = tmp_path / "image.json"
    path.write_text(json.dumps(fields))
    return path


def test_a_matching_image_skips_what_it_baked(tmp_path):
    got = check(WANT, _record(tmp_path, roles=WANT["roles"], tags=["nvidia_driver", "dcgm"]))
    assert got == ImageCheck(("nvidia_driver", "dcgm"), "")
    assert ansible_env(got) == {"ANSIBLE_SKIP_TAGS": "nvidia_driver,dcgm"}


def test_another_roles_hash_configures_in_full_with_a_warning_naming_both(tmp_path):
    old = "sha256:" + "b" * 64
    got = check(WANT, _record(tmp_path, roles=old, tags=WANT["tags"]))
    assert got.skip == ()
    assert got.warning.startswith("WARNING: ")
    assert old in got.warning and WANT["roles"] in got.warning
    assert ansible_env(got) == {}


def test_a_missing_or_broken_record_configures_in_full_with_a_warning(tmp_path):
    got = check(WANT, tmp_path / "none.json")
    assert got.skip == () and "is missing" in got.warning and WANT["roles"] in got.warning
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert "unreadable" in check(WANT, broken).warning
    assert "holds no record" in check(WANT, _list(tmp_path)).warning


def _list(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[]")
    return path


def test_a_blueprint_without_a_baked_image_runs_in_full_silently(tmp_path):
    assert check(None, tmp_path / "none.json") == ImageCheck((), "")


def test_the_build_records_what_it_baked_and_refuses_a_second_reboot(tmp_path, monkeypatch):
    root = tmp_path / "artifact"
    root.mkdir()
    image = {**WANT, "contents": {"driver": "550"}}
    (root / "bootstrap.json").write_text(json.dumps({"image": image}))
    monkeypatch.setattr(bake, "REBOOT_REQUEST", tmp_path / "reboot")
    out = tmp_path / "etc" / "image.json"
    written = bake.record(root, "c" * 64, out)
    assert json.loads(out.read_text()) == written
    assert written["roles"] == WANT["roles"] and written["artifact"] == "c" * 64
    assert check(WANT, out).skip == tuple(WANT["tags"])  # what a node then finds
    (tmp_path / "reboot").write_text("")
    try:
        bake.record(root, "c" * 64, out)
    except SystemExit as exc:
        assert "reboot again" in str(exc)
    else:
        raise AssertionError("a reboot asked for after the build's was not refused")
