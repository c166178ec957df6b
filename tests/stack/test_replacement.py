"""Which edits replace which resources, when two offline plans (Pulumi's mocks: the engine and
AWS cannot be reached) are compared with the provider's rules: every edit the issue names is
planned before and after, and the steps `rackform diff` shows are checked."""

from __future__ import annotations

import pytest
from planhelp import AWS_INFERENCE, AWS_TRAINING, plan, variant

from rackform.stack.replacement import ignored, steps

INSTANCE = "aws:ec2/instance:Instance"


def resources(records):
    return {
        r.urn: {"type": r.type, "custom": r.custom, "inputs": r.inputs, "options": r.options}
        for r in records
    }


def compare(tmp_path, doc, **change):
    before = resources(plan(tmp_path, doc))
    after = resources(plan(tmp_path, variant(doc, **change)))
    return {
        u.rsplit("::", 1)[1]: (after.get(u) or before[u], s)
        for u, s in steps(before, after).items()
    }


def replaced(found, rtype):
    return {n: s for n, (r, s) in found.items() if r["type"] == rtype and s["op"] == "replace"}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            {"node_groups.0.instance_type": "p5e.48xlarge"},
            "instanceType: p5.48xlarge → p5e.48xlarge",
        ),
        ({"software": {"driver_branch": "570"}}, "rackform:driver-branch: 550 → 570"),
        ({"target.ami": {"image": "dlami-ubuntu-22.04"}}, "Deep Learning Base"),
        ({"target.availability_zone": "us-east-1b"}, "t-train-default-nodes replaced"),
    ],
    ids=["instance type", "driver branch", "image", "zone"],
)
def test_an_edit_to_what_a_node_is_replaces_every_training_instance(tmp_path, change, why):
    found = compare(tmp_path, AWS_TRAINING, **change)
    nodes = replaced(found, INSTANCE)
    assert sorted(nodes) == ["t-train-default-gpu-0", "t-train-default-gpu-1"]
    for s in nodes.values():
        assert s["reason"].startswith(
            "launchTemplate.version: new version of t-train-default-gpu-lt"
        )
        assert why in s["reason"]
        assert "launch_template ForceNew" in s["rule"]
        # Capacity-bound (a cluster placement group): the old node goes first.
        assert s["delete_before_replace"] is True
    # The template itself is updated (a new version), never replaced.
    lt = found["t-train-default-gpu-lt"][1]
    assert lt["op"] == "update" and lt["reason"].startswith("new version")


def test_a_new_zone_replaces_the_subnets_and_the_endpoint_old_ones_first(tmp_path):
    found = compare(tmp_path, AWS_TRAINING, **{"target.availability_zone": "us-east-1b"})
    subnets = replaced(found, "aws:ec2/subnet:Subnet")
    assert sorted(subnets) == ["t-train-default-nodes", "t-train-default-public"]
    assert all(s["delete_before_replace"] for s in subnets.values())
    assert "availability_zone ForceNew" in subnets["t-train-default-nodes"]["rule"]
    eice = found["t-train-default-eice"][1]
    assert eice["op"] == "replace" and "subnetId" in eice["reason"]
    assert found["t-train-default-nat"][1]["op"] == "replace"  # its public subnet is new


def test_a_new_image_replaces_its_pin_and_an_image_of_the_same_kind_changes_nothing(tmp_path):
    found = compare(tmp_path, AWS_TRAINING, **{"target.ami": {"image": "dlami-ubuntu-22.04"}})
    assert found["t-train-default-image"][1]["op"] == "replace"
    same = compare(tmp_path, AWS_TRAINING, **{"target.ami": {"image": "ubuntu-22.04"}})
    assert same == {}


def test_a_cosmetic_edit_replaces_nothing(tmp_path):
    found = compare(tmp_path, AWS_TRAINING, owner="someone@example.com")
    assert found and all(s["op"] == "update" for _, s in found.values())
    assert not any("reason" in s or "rolls" in s for _, s in found.values())


def test_an_inference_template_change_rolls_the_group_and_count_is_left_to_the_autoscaler(
    tmp_path,
):
    found = compare(tmp_path, AWS_INFERENCE, **{"software": {"driver_branch": "570"}})
    asg = found["t-serve-default-serve"][1]
    assert asg["op"] == "update" and asg["rolls"].startswith("instance refresh")
    # desiredCapacity is the autoscaler's (ignore_changes): a new count is no change at all
    # to the group.
    found = compare(tmp_path, AWS_INFERENCE, **{"node_groups.0.count": 3})
    step = found.get("t-serve-default-serve")
    assert step is None or not any(
        p["property"] == "desiredCapacity" for p in step[1]["properties"]
    )


def test_ignore_changes_paths():
    assert ignored("desiredCapacity", ["desiredCapacity"])
    assert ignored("tags.Name", ["tags"]) and ignored("tags[0]", ["tags"])
    assert not ignored("desiredCapacityType", ["desiredCapacity"])


def test_the_image_pin_keeps_what_it_found_until_its_kind_changes():
    from rackform.targets.aws.image_pin import ImagePinProvider

    p = ImagePinProvider()
    made = p.create({"image": "ubuntu-22.04", "image_id": "ami-0aaa"})
    assert made.outs["image_id"] == "ami-0aaa"
    newer = p.diff("id", made.outs, {"image": "ubuntu-22.04", "image_id": "ami-0bbb"})
    assert not newer.changes  # a "same" step: the engine keeps the recorded image_id
    other = p.diff("id", made.outs, {"image": "dlami-ubuntu-22.04", "image_id": "ami-0ccc"})
    assert other.changes and other.replaces == ["image"]
