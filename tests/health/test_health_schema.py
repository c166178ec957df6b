"""lifecycle.health in a blueprint: the defaults, and each mistake as one located line (file,
line, field) with exit 2: an action the target cannot carry out, a budget that is not one, a
field that does not exist."""

from __future__ import annotations

import pytest
from blueprint_helpers import located_line, validate_text

AWS = """\
name: gpu-train-1
purpose: training
owner: a@example.com
target: {{type: aws, region: us-east-1, availability_zone: us-east-1a, ssh_cidrs: [10.0.0.0/16]}}
node_groups: [{{name: h100-pool, instance_type: p5.48xlarge, count: 2}}]
network: {{fabric: efa}}
lifecycle:
  health: {health}
"""

BARE = """\
name: dc-train
purpose: training
owner: a@example.com
target: {{type: bare_metal, capex_usd_per_gpu: 30000, amortize_months: 36}}
node_groups:
  - name: hgx
    gpu: H100-SXM
    gpus_per_node: 8
    hosts:
      - {{name: hgx-01, address: 10.0.0.1}}
      - {{name: hgx-02, address: 10.0.0.2}}
network: {{fabric: ethernet}}
lifecycle:
  health: {health}
"""


@pytest.mark.parametrize(
    ("template", "health"),
    [
        (AWS, "{}"),
        (AWS, "{actions: {gpu_missing: replace, xid: {79: replace, 13: drain}}}"),
        (BARE, "{actions: {gpu_missing: power-cycle}}\n  max_out_of_service: '50%'"),
        (BARE, "{notify_only: true}\n  max_out_of_service: 1"),
    ],
)
def test_a_policy_the_target_can_carry_out_is_valid(tmp_path, template, health):
    _, r = validate_text(tmp_path, template.format(health=health))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("template", "health", "where", "message"),
    [
        (AWS, "{actions: {gpu_missing: power-cycle}}", ":8:",
         "lifecycle.health.actions.gpu_missing: power-cycle is not a heal action on aws"),
        (AWS, "{actions: {xid: {79: power-cycle}}}", ":8:",
         "lifecycle.health.actions.xid[79]: power-cycle is not a heal action on aws"),
        (BARE, "{actions: {storage: replace}}", ":14:",
         "lifecycle.health.actions.storage: replace is not a heal action on bare_metal"),
        (BARE, "{}\n  max_out_of_service: '150%'", ":15:",
         "'150%' is neither a node count nor a share such as '10%'"),
        (BARE, "{actions: {ecc: reset}}", ":14:", "ecc"),
        (BARE, "{actions: {memory: fix-it}}", ":14:", "memory"),
    ],
)  # fmt: skip
def test_a_mistake_is_one_located_line(tmp_path, template, health, where, message):
    f, r = validate_text(tmp_path, template.format(health=health))
    line = located_line(f, r)
    assert line.startswith(f"{f}{where}") and message in line, line


def test_a_target_says_which_actions_it_has(tmp_path):
    _, r = validate_text(tmp_path, AWS.format(health="{actions: {fabric: power-cycle}}"))
    assert "use one of: monitor, drain, reset, reboot, replace" in r.stderr
    _, r = validate_text(tmp_path, BARE.format(health="{actions: {fabric: replace}}"))
    assert "use one of: monitor, drain, reset, reboot, power-cycle" in r.stderr
