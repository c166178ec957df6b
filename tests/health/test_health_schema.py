"""lifecycle.health in a blueprint: the defaults, and each mistake as one located line (file,
line, field) with exit 2: an action the target cannot carry out, a budget that is not one, a
field that does not exist."""

from __future__ import annotations

import pytest
from blueprint_helpers import aws_text, bare_text, located_line, validate_text


def on_aws(health: str) -> str:
    """Two p5 nodes, with `lifecycle.health: <health>`."""
    return aws_text(f"lifecycle:\n  health: {health}\n")


def on_metal(health: str) -> str:
    """Two bare-metal hosts, with `lifecycle.health: <health>`."""
    return bare_text(f"lifecycle:\n  health: {health}\n", hosts=2)


@pytest.mark.parametrize(
    ("template", "health"),
    [
        (on_aws, "{}"),
        (on_aws, "{actions: {gpu_missing: replace, xid: {79: replace, 13: drain}}}"),
        (on_metal, "{actions: {gpu_missing: power-cycle}}\n  max_out_of_service: '50%'"),
        (on_metal, "{notify_only: true}\n  max_out_of_service: 1"),
    ],
)
def test_a_policy_the_target_can_carry_out_is_valid(tmp_path, template, health):
    _, r = validate_text(tmp_path, template(health))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("template", "health", "where", "message"),
    [
        (on_aws, "{actions: {gpu_missing: power-cycle}}", ":8:",
         "lifecycle.health.actions.gpu_missing: power-cycle is not a heal action on aws"),
        (on_aws, "{actions: {xid: {79: power-cycle}}}", ":8:",
         "lifecycle.health.actions.xid[79]: power-cycle is not a heal action on aws"),
        (on_metal, "{actions: {storage: replace}}", ":14:",
         "lifecycle.health.actions.storage: replace is not a heal action on bare_metal"),
        (on_metal, "{}\n  max_out_of_service: '150%'", ":15:",
         "'150%' is neither a node count nor a share such as '10%'"),
        (on_metal, "{actions: {ecc: reset}}", ":14:", "ecc"),
        (on_metal, "{actions: {memory: fix-it}}", ":14:", "memory"),
    ],
)  # fmt: skip
def test_a_mistake_is_one_located_line(tmp_path, template, health, where, message):
    f, r = validate_text(tmp_path, template(health))
    line = located_line(f, r)
    assert line.startswith(f"{f}{where}") and message in line, line


def test_a_target_says_which_actions_it_has(tmp_path):
    _, r = validate_text(tmp_path, on_aws("{actions: {fabric: power-cycle}}"))
    assert "use one of: monitor, drain, reset, reboot, replace" in r.stderr
    _, r = validate_text(tmp_path, on_metal("{actions: {fabric: replace}}"))
    assert "use one of: monitor, drain, reset, reboot, power-cycle" in r.stderr
