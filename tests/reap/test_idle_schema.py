"""Idle actions per target and the BMC fields: a wrong combination is one located line, exit 2."""

from __future__ import annotations

import textwrap

import pytest
from blueprint_helpers import validate_text
from clusters import bare_metal

AWS = """\
name: t1
purpose: {purpose}
owner: a@example.com
target: {{type: aws, region: us-east-1, availability_zone: us-east-1a, ssh_cidrs: [10.0.0.0/16]}}
node_groups: [{{name: g, instance_type: g6e.12xlarge, count: 2{extra}}}]
network: {{fabric: ethernet}}
lifecycle:
  idle: {{action: {action}}}
"""


@pytest.mark.parametrize(
    ("purpose", "action", "extra", "where", "message"),
    [
        ("training", "power-off", "", ":8:", "power-off is not an idle action for a training cluster on aws"),
        ("training", "scale-to-zero", "", ":8:", "use one of: notify, destroy, stop"),
        ("inference", "stop", ", min_count: 0, max_count: 4", ":8:", "use one of: notify, destroy, scale-to-zero"),
        ("inference", "scale-to-zero", ", min_count: 1, max_count: 4", ":5:", "scale-to-zero needs min_count: 0 on node group 'g'"),
    ],
)  # fmt: skip
def test_aws_refuses_actions_it_cannot_carry_out(tmp_path, purpose, action, extra, where, message):
    f, r = validate_text(tmp_path, AWS.format(purpose=purpose, action=action, extra=extra))
    assert r.returncode == 2
    line = r.stderr.strip().splitlines()[0]
    assert line.startswith(f"{f}{where}") and message in line, r.stderr


def test_aws_scale_to_zero_on_an_inference_group_that_may_go_to_zero_is_valid(tmp_path):
    text = AWS.format(
        purpose="inference", action="scale-to-zero", extra=", min_count: 0, max_count: 4"
    )
    _, r = validate_text(tmp_path, text)
    assert r.returncode == 0, r.stderr


def test_owned_hosts_are_not_destroyed_by_a_reaper(tmp_path):
    _, r = validate_text(tmp_path, bare_metal("dc", action="destroy"))
    assert r.returncode == 2
    assert (
        "lifecycle.idle.action: destroy is not an idle action for a training cluster on bare_metal"
        in r.stderr
    )
    assert "use one of: notify, power-off, drain" in r.stderr


def test_power_off_needs_a_bmc_on_every_host(tmp_path):
    text = bare_metal("dc", action="power-off", bmcs={"dc-0": ("s0", "PW")})
    f, r = validate_text(tmp_path, text)
    assert r.returncode == 2
    assert f"{f}:11:" in r.stderr and "node_groups[0].hosts[1].bmc" in r.stderr
    assert "idle action power-off needs a bmc on host 'dc-1'" in r.stderr
    assert "dc-0" not in r.stderr


@pytest.mark.parametrize(
    ("bmc", "message"),
    [
        ("{address: 'https://10.9.0.1', username_env: U}", "bmc.password_env: password_env is missing"),
        ("{address: 'https://10.9.0.1'}", "bmc.credentials_file: the BMC has no credentials"),
        ("{address: 'https://10.9.0.1', username_env: U, password_env: P, credentials_file: /s}", "not both"),
        ("{address: 'ftp://10.9.0.1', credentials_file: /s}", "bmc.address"),
        ("{address: 'https://10.9.0.1', credentials_file: /s, password: x}", "bmc.password"),
    ],
)  # fmt: skip
def test_bmc_mistakes_are_located(tmp_path, bmc, message):
    text = textwrap.dedent(f"""\
        name: dc
        purpose: training
        owner: ops@example.com
        target: {{type: bare_metal}}
        node_groups:
          - name: gpu
            gpu: H100-SXM
            gpus_per_node: 8
            hosts:
              - {{name: h1, address: 10.9.1.1, bmc: {bmc}}}
        network: {{fabric: ethernet}}
        """)
    f, r = validate_text(tmp_path, text)
    assert r.returncode == 2
    assert r.stderr.startswith(f"{f}:10:") and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
