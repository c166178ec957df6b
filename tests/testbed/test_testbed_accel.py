"""Choosing KVM or TCG: the override and the per-boot memo of the probe's answer."""

from __future__ import annotations

import json
from pathlib import Path

from rackform.testbed import accel


def test_the_environment_overrides_the_probe(monkeypatch, tmp_path):
    monkeypatch.setenv("RACKFORM_TESTBED_ACCEL", "tcg")
    assert accel.choose_accel(Path("/nonexistent"), tmp_path) == (
        "tcg",
        "set by RACKFORM_TESTBED_ACCEL",
    )


def test_the_answer_is_remembered_for_this_host_boot_only(monkeypatch, tmp_path):
    monkeypatch.delenv("RACKFORM_TESTBED_ACCEL", raising=False)
    memo = tmp_path / "accel.json"
    memo.write_text(json.dumps({"boot_id": accel._boot_id(), "accel": "kvm", "why": "probed"}))
    assert accel.choose_accel(Path("/nonexistent"), tmp_path) == (
        "kvm",
        "probed (cached for this host boot)",
    )


def test_a_missing_kernel_is_not_mistaken_for_working_kvm(monkeypatch, tmp_path):
    monkeypatch.delenv("RACKFORM_TESTBED_ACCEL", raising=False)
    (tmp_path / "accel.json").write_text(
        json.dumps({"boot_id": "another boot", "accel": "kvm", "why": "old"})
    )
    chosen, why = accel.choose_accel(tmp_path / "no-such-kernel", tmp_path)
    assert chosen == "tcg" and why
    assert json.loads((tmp_path / "accel.json").read_text())["boot_id"] == accel._boot_id()
