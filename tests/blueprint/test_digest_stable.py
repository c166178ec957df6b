"""A blueprint's digest does not move when rackform adds a field: validation evidence and
promotions name a blueprint by its digest, so a release that changed the digest of a blueprint
nobody edited would send every cluster back to validation. The example blueprints' digests
below were recorded at e1d82f3, before the fields of 2026-12-05 (topology, a group's market,
async checkpoints, the lifecycle's alert figures, the serving workload) came in."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackform.blueprint.loader import digest_of, load_effective

ROOT = Path(__file__).resolve().parents[2]
RECORDED = {
    (
        "aws-inference.yaml",
        "default",
    ): "sha256:15c9d3e99b96833709b204a9493171034c7773666372e82699b14c19c9333c88",
    (
        "aws-inference.yaml",
        "dev",
    ): "sha256:e1d059c9c3bf888d6256f68f58f76916e87f88a0c05d6108441923fe66a7c42e",
    (
        "aws-inference.yaml",
        "prod",
    ): "sha256:4ddf815ad8cf073b0ea9a1fc231f3bdce24ced35bc959d72171b81af5242380b",
    (
        "aws-training.yaml",
        "default",
    ): "sha256:71925b068582e004e05d667ba002d04d983424b497d69b6fd0c9f0c0cf7290e4",
    (
        "aws-training.yaml",
        "dev",
    ): "sha256:e969cb09e54aaea4d60253b98da05678df4b845728b32f839122c8d1c847e1ed",
    (
        "aws-training.yaml",
        "staging",
    ): "sha256:46a61ffd3b7f07adb9e9eecc01ebe37010067d9196555305d39e0a0e434fb475",
    (
        "aws-training.yaml",
        "prod",
    ): "sha256:27311c0c062cd08ed6367a00e5cba32bfb6a738cf70fe44e216b35d3fe03264b",
    (
        "baremetal-slurm.yaml",
        "default",
    ): "sha256:a3066d6776bac14cf3b9eb4a7e341901398740dc8963ba11c08385a9c259b92b",
    (
        "baremetal-slurm.yaml",
        "staging",
    ): "sha256:dd697e688650f7dd50f3d9509964e7e1829bfc6a66f2a4e09ca2809db55d9817",
    (
        "baremetal-slurm.yaml",
        "prod",
    ): "sha256:a3066d6776bac14cf3b9eb4a7e341901398740dc8963ba11c08385a9c259b92b",
    (
        "baremetal-training.yaml",
        "default",
    ): "sha256:e506bcd38d420fbdeb3d4d4a6db14d31aac6ef03b92af17a795adf79fcc6e528",
    (
        "baremetal-training.yaml",
        "staging",
    ): "sha256:620dbaa298c4e73be98f80629af9d1bc4cf0e92ec205b99d6e7888260cae3668",
    (
        "baremetal-training.yaml",
        "prod",
    ): "sha256:e506bcd38d420fbdeb3d4d4a6db14d31aac6ef03b92af17a795adf79fcc6e528",
    (
        "colo-inference.yaml",
        "default",
    ): "sha256:581cfa2fb721ea735cb155232f789f10d6cb08fac18adc6d39bbd7f27ef732c4",
    (
        "colo-inference.yaml",
        "prod",
    ): "sha256:581cfa2fb721ea735cb155232f789f10d6cb08fac18adc6d39bbd7f27ef732c4",
}


@pytest.mark.parametrize(("name", "env"), sorted(RECORDED))
def test_an_unedited_blueprint_keeps_its_digest(name, env):
    assert (
        digest_of(load_effective(ROOT / "blueprints" / name, env).blueprint)
        == RECORDED[(name, env)]
    )


def test_a_later_field_set_to_something_else_counts(tmp_path):
    text = (ROOT / "blueprints" / "baremetal-training.yaml").read_text()
    before = digest_of(load_effective(ROOT / "blueprints" / "baremetal-training.yaml").blueprint)
    edited = tmp_path / "bp.yaml"
    edited.write_text(text + "\n" if not text.endswith("\n") else text)
    assert digest_of(load_effective(edited).blueprint) == before
    edited.write_text(text.replace("workload:\n", "workload:\n  checkpoint_async: true\n", 1))
    assert "checkpoint_async: true" in edited.read_text()
    assert digest_of(load_effective(edited).blueprint) != before
