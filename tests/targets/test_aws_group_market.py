"""A market per node group (a capacity block for the GPUs beside on-demand nodes) and each
group's machine image by its CPU architecture, under Pulumi's mock runtime (the engine and AWS
are what this machine cannot reach), with the located errors of what cannot be built."""

from __future__ import annotations

import copy
import re

import pytest
from planhelp import AWS_TRAINING, of_type, plan, write_blueprint

from rackform.blueprint.loader import load_effective
from rackform.blueprint.problems import BlueprintError
from rackform.blueprint.targets.aws.images import IMAGES
from rackform.engine import compile_effective

BLOCK = "cr-0123456789abcdef0"


def mixed() -> dict:
    doc = copy.deepcopy(AWS_TRAINING)
    doc["node_groups"] = [
        {"name": "gpu", "instance_type": "p5.48xlarge", "count": 2},
        {
            "name": "blk",
            "instance_type": "p5.48xlarge",
            "count": 2,
            "market": "capacity-block",
            "reservation_id": BLOCK,
        },
    ]
    return doc


def templates(recs) -> dict[str, dict]:
    return {r.name.rsplit("-", 2)[-2]: r.inputs for r in of_type(recs, "LaunchTemplate")}


def test_each_group_gets_its_own_market_and_only_unbound_groups_share_the_placement_group(
    tmp_path,
):
    recs = plan(tmp_path, mixed())
    lts = templates(recs)
    assert "instanceMarketOptions" not in lts["gpu"]
    assert "capacityReservationSpecification" not in lts["gpu"]
    assert lts["blk"]["instanceMarketOptions"] == {"marketType": "capacity-block"}
    target = lts["blk"]["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": BLOCK}
    # The block sits where it was bought: never in the placement group the stack creates.
    (pg,) = of_type(recs, "placementGroup:PlacementGroup")
    assert lts["gpu"]["placement"] == {"groupName": f"<{pg.name}>.name"}
    assert lts["blk"].get("placement") is None


def test_mixed_markets_are_priced_per_group_and_replaced_delete_first(tmp_path):
    p = compile_effective(load_effective(write_blueprint(tmp_path, mixed())))
    assert p.cost.basis == "aws on-demand + capacity-block"
    lines = {line.item: line for line in p.cost.compute}
    assert "2 x p5.48xlarge on-demand" in lines and "2 x p5.48xlarge capacity-block" in lines
    assert p.target_plan.rollout == "delete-first"
    assert BLOCK in p.target_plan.rollout_why


def test_a_group_without_a_market_of_its_own_follows_the_target(tmp_path):
    doc = mixed()
    doc["target"] |= {"market": "reservation", "reservation_id": "cr-00000000000000001"}
    doc["node_groups"][0]["market"] = "on-demand"
    doc["node_groups"].append({"name": "rest", "instance_type": "p5.48xlarge", "count": 1})
    recs = plan(tmp_path, doc)
    lts = templates(recs)
    rest = lts["rest"]["capacityReservationSpecification"]["capacityReservationTarget"]
    assert rest == {"capacityReservationId": "cr-00000000000000001"}
    assert "capacityReservationSpecification" not in lts["gpu"]
    assert of_type(recs, "placementGroup:PlacementGroup")  # for the on-demand group


@pytest.mark.parametrize(
    ("group", "field", "says"),
    [
        ({"market": "capacity-block"}, "reservation_id", "needs the group's reservation_id"),
        ({"reservation_id": BLOCK}, "reservation_id", "needs the group's own market"),
        ({"market": "spot", "reservation_id": BLOCK}, "reservation_id", "not 'spot'"),
        ({"market": "bid"}, "market", "Input should be 'on-demand'"),
    ],
)
def test_a_groups_market_errors_are_located(tmp_path, group, field, says):
    doc = copy.deepcopy(AWS_TRAINING)
    doc["node_groups"][0] |= group
    with pytest.raises(BlueprintError) as err:
        load_effective(write_blueprint(tmp_path, doc))
    text = str(err.value)
    # file:line:col, then the field, then what is wrong.
    assert re.search(rf"bp\.yaml:\d+:\d+: node_groups\[0\]\.{field}: .*{re.escape(says)}", text), (
        text
    )


def test_spot_group_in_training_needs_a_checkpoint_interval(tmp_path):
    doc = copy.deepcopy(AWS_TRAINING)
    doc["workload"].pop("checkpoint_interval_min")
    doc["node_groups"][0]["market"] = "spot"
    with pytest.raises(BlueprintError, match="checkpoints and resumes"):
        load_effective(write_blueprint(tmp_path, doc))


def test_every_image_kind_names_an_arm64_build_or_says_it_has_none():
    ubuntu = IMAGES["ubuntu-22.04"]
    assert "amd64" in ubuntu.name_filter_for("x86_64")
    assert "arm64" in ubuntu.name_filter_for("arm64")
    assert "arm64" in IMAGES["ubuntu-24.04"].name_filter_for("arm64")
    assert not IMAGES["dlami-ubuntu-22.04"].serves("arm64")
    with pytest.raises(ValueError, match="no arm64 build"):
        IMAGES["dlami-ubuntu-22.04"].name_filter_for("arm64")


def test_x86_groups_look_up_the_x86_64_build_only(tmp_path):
    recs = plan(tmp_path, AWS_TRAINING)
    (pin,) = of_type(recs, "rackform:ImagePin")
    assert pin.name == "t-train-default-image"
    lt = of_type(recs, "LaunchTemplate")[0].inputs
    assert "amd64" in lt["imageId"]


def test_the_architecture_comes_from_the_instance_type(tmp_path, monkeypatch):
    # The catalog lists no arm64 GPU type yet (P6e-GB200 waits for its EFA layout): a copy of
    # p6-b200's entry as arm64 stands in for one, so the lookup is the stack's real code.
    import dataclasses

    from rackform.blueprint.targets.aws import catalog as aws_catalog

    real = aws_catalog.load_aws_catalog()
    grace = dataclasses.replace(real.instance("p6-b200.48xlarge"), key="x-grace", arch="arm64")
    fake = dataclasses.replace(real, instances={**real.instances, "x-grace": grace})
    monkeypatch.setattr(aws_catalog, "load_aws_catalog", lambda: fake)
    for mod in (
        "rackform.blueprint.targets.aws.groups",
        "rackform.blueprint.targets.aws.schema",
        "rackform.plan.targets.aws.compile",
    ):
        monkeypatch.setattr(f"{mod}.load_aws_catalog", lambda: fake)
    doc = copy.deepcopy(AWS_TRAINING)
    doc["node_groups"].append({"name": "grace", "instance_type": "x-grace", "count": 1})
    recs = plan(tmp_path, doc)
    pins = {p.name: p for p in of_type(recs, "rackform:ImagePin")}
    assert set(pins) == {"t-train-default-image", "t-train-default-image-arm64"}
    lts = templates(recs)
    assert "arm64" in lts["grace"]["imageId"] and "amd64" not in lts["grace"]["imageId"]
    assert "amd64" in lts["gpu"]["imageId"]
    # One explicit AMI cannot boot both architectures; a DLAMI has no arm64 build known here;
    # the node image is baked on x86_64 only.
    for change, says in (
        ({"target.ami": {"id": "ami-0123456789abcdef0"}}, "target.ami.id: one AMI cannot boot"),
        (
            {"target.ami": {"image": "dlami-ubuntu-22.04"}},
            "node_groups[1].instance_type: x-grace is arm64, and no arm64 build of dlami",
        ),
        ({"image": {"bake": True}}, "image.bake: the node image is baked on an x86_64 builder"),
    ):
        bad = copy.deepcopy(doc)
        for key, value in change.items():
            if key.startswith("target."):
                bad["target"][key.split(".", 1)[1]] = value
            else:
                bad[key] = value
        with pytest.raises(BlueprintError) as err:
            load_effective(write_blueprint(tmp_path, bad))
        assert says in str(err.value)


def test_p6_b200_is_unpriced_and_names_the_quota_it_draws_on(tmp_path):
    doc = copy.deepcopy(AWS_TRAINING)
    doc["node_groups"][0]["instance_type"] = "p6-b200.48xlarge"
    p = compile_effective(load_effective(write_blueprint(tmp_path, doc)))
    assert p.node_groups[0].gpu.key == "B200" and p.node_groups[0].efa_interfaces == 8
    assert p.cost.usd_per_hour is None
    notes = "\n".join(p.cost.notes)
    assert "the catalog has no on-demand price for p6-b200.48xlarge" in notes
    assert "draws 384 vCPUs on AWS quota L-417A185B" in notes
    # On a capacity block it draws on no vCPU quota, and has no recorded price either.
    doc["node_groups"][0] |= {"market": "capacity-block", "reservation_id": BLOCK}
    p = compile_effective(load_effective(write_blueprint(tmp_path, doc)))
    assert not [n for n in p.cost.notes if "quota" in n]
    assert any("no capacity-block price for p6-b200.48xlarge" in n for n in p.cost.notes)


def test_an_unpriced_group_leaves_no_total_but_the_others_keep_their_lines(tmp_path):
    # A capacity block of P6-B200 (no published price) beside on-demand and spot P5 groups: the
    # P5 lines stay; no total and no spot range, since either would read as the whole cost.
    doc = mixed()
    doc["node_groups"][1]["instance_type"] = "p6-b200.48xlarge"
    doc["node_groups"].append(
        {"name": "cheap", "instance_type": "p5.48xlarge", "count": 1, "market": "spot"}
    )
    p = compile_effective(load_effective(write_blueprint(tmp_path, doc)))
    lines = [line.item for line in p.cost.compute]
    assert len(lines) == 2 and lines[0] == "2 x p5.48xlarge on-demand", lines
    assert lines[1].startswith("1 x p5.48xlarge spot"), lines
    assert p.cost.usd_per_hour is None and p.cost.usd_per_month is None
    assert p.cost.spot_usd_per_hour_range is None
    assert any("no capacity-block price for p6-b200.48xlarge" in n for n in p.cost.notes)


@pytest.mark.parametrize("named", ["p6e-gb200.36xlarge", "u-p6e-gb200x72"])
def test_an_ultraserver_type_is_named_as_one_not_guessed_at(tmp_path, named):
    # Neither is a type a node group launches yet; the error says what it is and why, located,
    # rather than "did you mean p6-b200.48xlarge".
    doc = copy.deepcopy(AWS_TRAINING)
    doc["node_groups"][0]["instance_type"] = named
    with pytest.raises(BlueprintError) as err:
        load_effective(write_blueprint(tmp_path, doc))
    said = str(err.value)
    assert "node_groups[0].instance_type" in said and "sold only as UltraServers" in said
    assert "u-p6e-gb200x72 (18 instances)" in said and "did you mean" not in said
