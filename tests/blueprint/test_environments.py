"""Environment merging and the effective blueprint's digest."""

from __future__ import annotations

import pytest
from blueprint_helpers import AWS_TRAINING, BARE_METAL

from rackform.blueprint.environments import merge
from rackform.blueprint.loader import load_effective
from rackform.blueprint.problems import BlueprintError


def test_merge_semantics():
    base = {
        "a": 1,
        "m": {"x": 1, "y": 2},
        "l": [1, 2],
        "ng": [{"name": "a", "n": 1}, {"name": "b", "n": 2}],
    }
    over = {
        "m": {"y": 3},
        "l": [9],
        "ng": [{"name": "b", "n": 5}, {"name": "c", "n": 7}, {"name": "a", "remove": True}],
    }
    merged, origin = merge(base, over, ("environments", "dev"))
    assert merged == {
        "a": 1,
        "m": {"x": 1, "y": 3},
        "l": [9],
        "ng": [{"name": "b", "n": 5}, {"name": "c", "n": 7}],
    }
    assert origin[("m", "x")] == ("m", "x")
    assert origin[("m", "y")] == ("environments", "dev", "m", "y")
    assert origin[("ng", 0, "n")] == ("environments", "dev", "ng", 0, "n")
    assert origin[("ng", 1)] == ("environments", "dev", "ng", 1)
    assert base["ng"][0] == {"name": "a", "n": 1}, "the base is not modified"


def test_digest_is_stable_across_formatting(write):
    a = write(AWS_TRAINING, "a.yaml")
    reformatted = "# a comment\n" + AWS_TRAINING.replace(
        "network: {fabric: efa}", "network:\n  fabric: efa"
    ).replace("owner: team@example.com\n", "").replace(
        "purpose: training\n", "purpose: training\nowner: team@example.com\n"
    )
    b = write(reformatted, "b.yaml")
    # Writing a default explicitly does not change the effective content either.
    c = write(AWS_TRAINING.replace("  ssh_cidrs:", "  market: on-demand\n  ssh_cidrs:"), "c.yaml")
    digests = {load_effective(p).digest for p in (a, b, c)}
    assert len(digests) == 1
    assert next(iter(digests)).startswith("sha256:")


def test_digest_changes_with_content(write):
    a = load_effective(write(AWS_TRAINING, "a.yaml")).digest
    b = load_effective(write(AWS_TRAINING.replace("count: 2", "count: 3"), "b.yaml")).digest
    assert a != b


def test_environment_with_same_content_as_base_has_same_digest(write):
    path = write(
        AWS_TRAINING + "environments:\n  prod: {}\n  dev: {node_groups: [{name: gpu, count: 1}]}\n"
    )
    assert load_effective(path).digest == load_effective(path, "prod").digest
    assert load_effective(path).digest != load_effective(path, "dev").digest


def test_removing_a_name_the_base_lacks_is_an_error_with_a_did_you_mean(write):
    # A typo of an existing host used to be accepted and the host silently kept.
    path = write(
        BARE_METAL
        + "environments:\n  small: {node_groups: [{name: hgx, hosts: [{name: n22, remove: true}]}]}\n"
    )
    with pytest.raises(BlueprintError) as exc:
        load_effective(path, "small")
    (p,) = exc.value.problems
    assert p.message == "there is no 'n22' to remove (the base has: n1, n2)"
    assert p.fix == "did you mean 'n2'?"
    assert (p.line, p.env) == (14, "small")


def test_an_override_of_a_name_the_base_lacks_says_which_it_meant(write):
    path = write(AWS_TRAINING + "environments:\n  dev: {node_groups: [{name: gpus, count: 1}]}\n")
    with pytest.raises(BlueprintError) as exc:
        load_effective(path, "dev")
    named = [p for p in exc.value.problems if "is not in the base" in p.message]
    assert len(named) == 1 and named[0].fix == "did you mean 'gpu'?"
    # A complete new item is an addition, as documented.
    extra = "{name: big, instance_type: p5.48xlarge, count: 1}"
    path = write(AWS_TRAINING + f"environments:\n  dev: {{node_groups: [{extra}]}}\n", "ok.yaml")
    assert [g.name for g in load_effective(path, "dev").blueprint.node_groups] == ["gpu", "big"]


def test_an_environment_carries_the_base_blueprints_promotion_rule(write):
    """The promotion rule is the base's, validated with it, and reaches every environment's plan
    the same way whether one environment is loaded or all of them."""
    from rackform.blueprint.loader import load_all
    from rackform.engine import prepare

    path = write(
        AWS_TRAINING
        + "environments:\n  staging-eu: {}\n  prod-eu: {}\n"
        + "promotion:\n  prod-eu: {from: staging-eu}\n"
    )
    one = {
        env: load_effective(path, env).promoted_from for env in ("default", "staging-eu", "prod-eu")
    }
    every = {e.environment: e.promoted_from for e in load_all(path)}
    assert one == every == {"default": None, "staging-eu": None, "prod-eu": "staging-eu"}
    assert prepare(path, "prod-eu").plan.promoted_from == "staging-eu"
    # The file's rules, read once by the loader, are what a promotion pins, in every
    # environment (the base included) and however the file was loaded.
    from rackform.evidence.pin import rules

    pinned = [rules(prepare(path, env).plan) for env in ("default", "staging-eu", "prod-eu")]
    assert pinned == [{"prod-eu": "staging-eu"}] * 3
    assert {e.promotion for e in load_all(path)} == {(("prod-eu", "staging-eu"),)}


def test_an_environment_of_a_base_with_a_wrong_promotion_rule_is_refused(write):
    path = write(AWS_TRAINING + "environments:\n  prod: {}\npromotion:\n  prod: {from: stagin}\n")
    with pytest.raises(BlueprintError) as exc:
        load_effective(path, "prod")
    assert "prod cannot be promoted from 'stagin'" in str(exc.value)
