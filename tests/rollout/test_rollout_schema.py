"""lifecycle.max_out_of_service and lifecycle.rollout in a blueprint: a policy that could take
every node out at once, or a batch larger than the budget or than any rack, is one located line
(file, line, field) with exit 2; a policy within them is valid."""

from __future__ import annotations

import pytest
from blueprint_helpers import aws_text, bare_text, located_line, validate_text


def in_racks(lifecycle: str) -> str:
    """Five hosts, three in rack r1 and two in r2, with `lifecycle`'s lines."""
    return bare_text(f"lifecycle:\n{lifecycle}\n", hosts=5, racks=("r1", "r1", "r1", "r2", "r2"))


def on_aws(lifecycle: str) -> str:
    """Four p5 nodes, with `lifecycle`'s lines."""
    return aws_text(f"lifecycle:\n{lifecycle}\n", count=4)


@pytest.mark.parametrize(
    ("template", "lifecycle"),
    [
        (in_racks, "  max_out_of_service: 4"),
        (in_racks, "  max_out_of_service: '80%'\n  rollout: {batch_size: 3}"),
        (in_racks, "  rollout: {canary: false, jobs: wait, wait_minutes: 240}"),
        (on_aws, "  max_out_of_service: 2\n  rollout: {batch_size: 2}"),
    ],
)
def test_a_policy_within_the_cluster_is_valid(tmp_path, template, lifecycle):
    _, r = validate_text(tmp_path, template(lifecycle))
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("template", "lifecycle", "where", "message"),
    [
        (in_racks, "  max_out_of_service: 5", ":17:",
         "lifecycle.max_out_of_service: 5 could take all 5 nodes out of service at once"),
        (in_racks, "  max_out_of_service: '100%'", ":17:",
         "lifecycle.max_out_of_service: '100%' could take all 5 nodes out of service at once"),
        (on_aws, "  max_out_of_service: 9", ":8:", "could take all 4 nodes out of service at once"),
        (in_racks, "  max_out_of_service: 2\n  rollout: {batch_size: 3}", ":18:",
         "lifecycle.rollout.batch_size: a batch of 3 nodes is more than the out-of-service"
         " budget (2 of 5 nodes)"),
        (in_racks, "  max_out_of_service: 4\n  rollout:\n    batch_size: 4", ":19:",
         "lifecycle.rollout.batch_size: a batch of 4 nodes is larger than any failure domain"
         " (the largest, rack r1, has 3): a batch never spans two"),
        (in_racks, "  rollout: {jobs: kill}", ":17:", "lifecycle.rollout.jobs"),
        (in_racks, "  rollout: {batch: 2}", ":17:", "batch"),
        (in_racks, "  max_out_of_service: '0%'", ":17:", "neither a node count nor a share"),
    ],
)  # fmt: skip
def test_a_mistake_is_one_located_line(tmp_path, template, lifecycle, where, message):
    f, r = validate_text(tmp_path, template(lifecycle))
    line = located_line(f, r)
    assert line.startswith(f"{f}{where}") and message in line, line


def test_a_single_node_cluster_may_take_its_node_out(tmp_path):
    _, r = validate_text(tmp_path, bare_text("lifecycle:\n  max_out_of_service: 1\n"))
    assert r.returncode == 0, r.stderr
