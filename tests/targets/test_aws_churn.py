"""Edits that do not change what a node is leave every node alone: each blueprint is planned
twice under the mocks (before and after the edit) and every node resource's inputs compared; the
Configure and Validate providers' own `diff` then decides, as the engine would ask it, whether
they would run again. Edits that do change a node show on its launch template.

What the mocks cannot show is the provider's reaction to a new launch-template version: an
`aws.ec2.Instance` whose `launch_template` changes is replaced (pulumi-aws / terraform-provider-
aws `aws_instance` docs: "launch_template ... forces a new resource"), and an autoscaling group
with `instance_refresh` rolls its instances. So a test here asserts on the template.
"""

from __future__ import annotations

import pytest
from planhelp import AWS_INFERENCE, AWS_TRAINING, BARE_METAL, of_type, one, plan, variant

from rackform.stack.stages import ConfigureProvider, ValidateProvider

NODE_TYPES = (
    "launchTemplate:LaunchTemplate",
    "ec2/instance:Instance",
    "autoscaling/group:Group",
    "rackform:NodeKeys",
    "rackform:Host",
)
# Edits of who owns a cluster, how it is reaped, how it is checked and what it costs.
COSMETIC = {
    "owner": {"owner": "someone-else@example.com"},
    "description": {"description": "a note"},
    "idle policy": {"lifecycle": {"idle": {"gpu_util_below_pct": 5, "for_minutes": 240}}},
    "smoke steps": {"validation": {"smoke_steps": 200}},
    "thresholds": {"validation": {"thresholds": {"mfu_pct": 20, "loss_drop_fraction": 0.1}}},
    "utilization (cost)": {"workload.expected_utilization_pct": 55},
}


def _method(doc) -> str:
    return "full" if doc["purpose"] == "training" else "serve"


def _by_name(records, suffixes=NODE_TYPES):
    return {r.name: r for s in suffixes for r in of_type(records, s)}


def _without_tags(inputs):
    return {k: v for k, v in inputs.items() if k != "tags"}


@pytest.mark.parametrize("edit", COSMETIC)
@pytest.mark.parametrize("doc", [AWS_TRAINING, AWS_INFERENCE, BARE_METAL], ids=lambda d: d["name"])
def test_a_cosmetic_edit_changes_no_node_and_reruns_neither_stage(tmp_path, doc, edit):
    doc = variant(doc, workload={"model_params_b": 7, "method": _method(doc)})
    before = plan(tmp_path, doc)
    after = plan(tmp_path, variant(doc, **COSMETIC[edit]))
    old, new = _by_name(before), _by_name(after)
    assert old and old.keys() == new.keys()
    for name, r in old.items():
        if r.type.endswith("launchTemplate:LaunchTemplate"):
            # The template, its tags included: a new version would replace training nodes.
            assert new[name].inputs == r.inputs, name
        else:
            # Instances and groups take the cluster's tags (owner, idle policy) in place.
            assert _without_tags(new[name].inputs) == _without_tags(r.inputs), name
    # The stages, asked as the engine asks them on the next `up`.
    for suffix, provider in (
        ("rackform:Configure", ConfigureProvider()),
        ("rackform:Validate", ValidateProvider()),
    ):
        olds, news = one(before, suffix).inputs, one(after, suffix).inputs
        assert not provider.diff("id", olds, news).changes, suffix
    configure_old, configure_new = (
        one(before, "rackform:Configure"),
        one(after, "rackform:Configure"),
    )
    assert configure_new.inputs["group_vars"] == configure_old.inputs["group_vars"]


def test_configuration_variables_carry_nothing_about_checking(tmp_path):
    configure = one(plan(tmp_path, BARE_METAL), "rackform:Configure")
    variables = configure.inputs["group_vars"]
    for key in ("rackform_digest", "smoke_train_steps", "smoke_train_job_args"):
        assert key not in variables
    assert variables["smoke_train_run"] is False  # prepared by configure, run by validate
    validate = one(plan(tmp_path, BARE_METAL), "rackform:Validate")
    assert validate.inputs["group_vars"]["smoke_train_steps"] == 50


def test_a_change_to_what_it_installs_reruns_configuration(tmp_path):
    before = one(plan(tmp_path, BARE_METAL), "rackform:Configure").inputs
    after = one(
        plan(tmp_path, variant(BARE_METAL, **{"software": {"driver_branch": "570"}})),
        "rackform:Configure",
    ).inputs
    assert ConfigureProvider().diff("id", before, after).changes


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"node_groups.0.instance_type": "p5en.48xlarge"}, "instanceType"),
        ({"target.ami": {"id": "ami-0123456789abcdef0"}}, "imageId"),
        ({"software": {"driver_branch": "570"}}, "tags"),
    ],
)
def test_a_change_to_what_a_node_is_makes_a_new_template(tmp_path, change, field):
    before = one(plan(tmp_path, AWS_TRAINING), "launchTemplate:LaunchTemplate").inputs
    after_recs = plan(tmp_path, variant(AWS_TRAINING, **change))
    after = one(after_recs, "launchTemplate:LaunchTemplate").inputs
    assert after[field] != before[field]
    # Every instance launches from the template's latest version: a new version replaces it.
    for instance in of_type(after_recs, "ec2/instance:Instance"):
        template = instance.inputs["launchTemplate"]
        assert template["version"].endswith(".latestVersion")


def test_protecting_a_cluster_changes_no_input(tmp_path):
    # In prod everything is protected; a cosmetic edit there must still be an in-place update,
    # which Pulumi's protect allows (it refuses only deletes and replacements).
    protected = variant(AWS_TRAINING, lifecycle={"protect": True})
    before = _by_name(plan(tmp_path, protected))
    after = _by_name(plan(tmp_path, variant(protected, owner="x@example.com")))
    for name, r in before.items():
        assert _without_tags(after[name].inputs) == _without_tags(r.inputs)
        assert after[name].protect
