"""The compiled plan carries every derived fact once, and its consumers read it: the thresholds,
the preflight context, the roles' variables and the Pulumi components agree with the plan
because they take the number from it."""

from __future__ import annotations

import dataclasses

import pytest
from blueprint_helpers import AWS_TRAINING, BARE_METAL, ROOT

from rackform.acceptance.argv import job_argv
from rackform.blueprint.loader import load_effective
from rackform.catalog.raid import role_table
from rackform.engine import compile_effective
from rackform.plan.model import thaw
from rackform.plan.thresholds import for_group
from rackform.targets.runtimes import runtime


def plan_of(path, env=None):
    return compile_effective(load_effective(path, env))


def test_the_aws_array_is_computed_once_and_read_everywhere(write):
    plan = plan_of(write(AWS_TRAINING))
    (g,) = plan.node_groups
    assert (g.array.drives, g.array.data_drives) == (8, 8)
    assert g.array.write_gbps == pytest.approx(28.0)
    assert g.array.capacity_gb == pytest.approx(8 * 3840)
    # The plan's slowest array, which preflight reads, is the group's, not a second computation.
    assert plan.sizing.array is g.array
    # The thresholds read the same figure.
    assert for_group(plan).checkpoint_write_gbps.value == pytest.approx(0.25 * 28.0)
    # And the role gets the catalog's RAID table, the one the array was sized with.
    assert plan.group_vars["nvme_raid_levels"] == role_table()
    assert thaw(plan.group_vars)["smoke_train_job_args"] == [
        a
        for a in job_argv(plan.expectations, steps=1, checkpoint_dir="/ck", nodes=2)[4:]
        if a not in ("--expect-nodes", "2")
    ]


def test_raid10_counts_the_same_in_the_plan_and_in_preflight(write):
    text = AWS_TRAINING + "storage: {checkpoint: {raid_level: 10}}\n"
    plan = plan_of(write(text))
    (g,) = plan.node_groups
    assert (g.array.level.level, g.array.data_drives) == (10, 4)
    assert g.array.write_gbps == pytest.approx(14.0)


def test_on_prem_drives_are_known_where_every_host_lists_them(write):
    listed = BARE_METAL.replace(
        "{name: n1, address: 10.0.0.1}", "{name: n1, address: 10.0.0.1, nvme: [A, B, C]}"
    ).replace("{name: n2, address: 10.0.0.2}", "{name: n2, address: 10.0.0.2, nvme: [D, E]}")
    (g,) = plan_of(write(listed)).node_groups
    assert g.array.drives == 2  # the node with the fewest listed drives
    (g,) = plan_of(write(BARE_METAL, "other.yaml")).node_groups
    assert g.array.drives is None  # found on the host by the nvme_raid role


def test_rack_power_is_planned_once_and_the_site_component_shows_it():
    from rackform.stack.offline import record

    plan = plan_of(ROOT / "blueprints" / "colo-inference.yaml")
    racks = {r.name: r.gpu_kw for r in plan.racks}
    assert racks == {"r01": pytest.approx(5.6), "r02": pytest.approx(5.6)}
    recorded = {
        r.inputs["rack"]: r.inputs["gpu_kw"]
        for r in record(plan, runtime(plan.target_type))
        if r.type == "rackform:colo:Rack"
    }
    assert recorded == pytest.approx(racks)


def test_the_plan_is_a_frozen_value(write):
    plan = plan_of(write(AWS_TRAINING))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.stack = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.group_vars["nvme_raid_level"] = 5  # type: ignore[index]
    # The same content in another file: the same cluster (digest), another stack config.
    other = plan_of(write(AWS_TRAINING, "same.yaml"))
    assert other.digest == plan.digest
    assert other.stack_config["rackform:blueprint"] != plan.stack_config["rackform:blueprint"]


def test_a_groups_size_bounds_fall_back_to_its_count_once():
    # The autoscaling group's sizes and the node count configuration must find both read these.
    scaled = plan_of(ROOT / "blueprints" / "aws-inference.yaml").node_groups[0]
    assert (scaled.min_nodes, scaled.count, scaled.max_nodes) == (2, 2, 8)
    fixed = plan_of(ROOT / "blueprints" / "aws-training.yaml").node_groups[0]
    assert fixed.min_count is None and fixed.max_count is None
    assert fixed.min_nodes == fixed.max_nodes == fixed.count
    parked = dataclasses.replace(fixed, count=0, min_count=None, max_count=3)
    assert (parked.min_nodes, parked.max_nodes) == (0, 3)
