"""lifecycle.max_out_of_service and lifecycle.rollout in a blueprint: a policy that could take
every node out at once, or a batch larger than the budget or than any rack, is one located line
(file, line, field) with exit 2; a policy within them is valid."""

from __future__ import annotations

import pytest
from blueprint_helpers import located_line, validate_text

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
      - {{name: hgx-01, address: 10.0.0.1, rack: r1}}
      - {{name: hgx-02, address: 10.0.0.2, rack: r1}}
      - {{name: hgx-03, address: 10.0.0.3, rack: r1}}
      - {{name: hgx-04, address: 10.0.0.4, rack: r2}}
      - {{name: hgx-05, address: 10.0.0.5, rack: r2}}
network: {{fabric: ethernet}}
lifecycle:
{lifecycle}
"""

AWS = """\
name: gpu-train-1
purpose: training
owner: a@example.com
target: {{type: aws, region: us-east-1, availability_zone: us-east-1a, ssh_cidrs: [10.0.0.0/16]}}
node_groups: [{{name: h100-pool, instance_type: p5.48xlarge, count: 4}}]
network: {{fabric: efa}}
lifecycle:
{lifecycle}
"""


@pytest.mark.parametrize(
    ("template", "lifecycle"),
    [
        (BARE, "  max_out_of_service: 4"),
        (BARE, "  max_out_of_service: '80%'\n  rollout: {batch_size: 3}"),
        (BARE, "  rollout: {canary: false, jobs: wait, wait_minutes: 240}"),
        (AWS, "  max_out_of_service: 2\n  rollout: {batch_size: 2}"),
    ],
)
def test_a_policy_within_the_cluster_is_valid(tmp_path, template, lifecycle):
    _, r = validate_text(tmp_path, template.format(lifecycle=lifecycle))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("template", "lifecycle", "where", "message"),
    [
        (BARE, "  max_out_of_service: 5", ":17:",
         "lifecycle.max_out_of_service: 5 could take all 5 nodes out of service at once"),
        (BARE, "  max_out_of_service: '100%'", ":17:",
         "lifecycle.max_out_of_service: '100%' could take all 5 nodes out of service at once"),
        (AWS, "  max_out_of_service: 9", ":8:", "could take all 4 nodes out of service at once"),
        (BARE, "  max_out_of_service: 2\n  rollout: {batch_size: 3}", ":18:",
         "lifecycle.rollout.batch_size: a batch of 3 nodes is more than the out-of-service"
         " budget (2 of 5 nodes)"),
        (BARE, "  max_out_of_service: 4\n  rollout:\n    batch_size: 4", ":19:",
         "lifecycle.rollout.batch_size: a batch of 4 nodes is larger than any failure domain"
         " (the largest, rack r1, has 3): a batch never spans two"),
        (BARE, "  rollout: {jobs: kill}", ":17:", "lifecycle.rollout.jobs"),
        (BARE, "  rollout: {batch: 2}", ":17:", "batch"),
        (BARE, "  max_out_of_service: '0%'", ":17:", "neither a node count nor a share"),
    ],
)  # fmt: skip
def test_a_mistake_is_one_located_line(tmp_path, template, lifecycle, where, message):
    f, r = validate_text(tmp_path, template.format(lifecycle=lifecycle))
    line = located_line(f, r)
    assert line.startswith(f"{f}{where}") and message in line, line


def test_a_single_node_cluster_may_take_its_node_out(tmp_path):
    one = "\n".join(x for x in BARE.splitlines() if "hgx-0" not in x or "hgx-01" in x) + "\n"
    _, r = validate_text(tmp_path, one.format(lifecycle="  max_out_of_service: 1"))
    assert r.returncode == 0, r.stderr
