"""The AWS components under Pulumi's mock runtime: what is and is not created for training and
inference clusters, EFA interfaces per type, markets, AMI, SSH exposure and tags."""

from __future__ import annotations

import re

import pytest
from planhelp import (
    AWS_INFERENCE,
    AWS_TRAINING,
    of_type,
    one,
    plan,
    taggable,
    variant,
    write_blueprint,
)

from rackform.blueprint.loader import load_effective
from rackform.blueprint.problems import BlueprintError
from rackform.blueprint.targets.aws.catalog import load_aws_catalog
from rackform.blueprint.targets.aws.exposure import public_share
from rackform.engine import compile_effective
from rackform.plan.targets.aws.compile import split_vpc
from rackform.targets.aws.nodes import efa_interfaces


def test_training_creates_network_identity_placement_template_and_one_instance_per_node(
    tmp_path,
):
    recs = plan(tmp_path, AWS_TRAINING)
    counts = {}
    for r in recs:
        counts[r.type] = counts.get(r.type, 0) + 1
    assert counts["aws:ec2/instance:Instance"] == 2
    assert counts["aws:ec2/securityGroup:SecurityGroup"] == 2  # the nodes', the endpoint's
    for kind in (
        "aws:ec2/vpc:Vpc",
        "aws:ec2transitgateway/instanceConnectEndpoint:InstanceConnectEndpoint",
        "pulumi-python:dynamic/rackform:NodeKeys",
        "aws:ec2/placementGroup:PlacementGroup",
        "aws:ec2/launchTemplate:LaunchTemplate",
        "aws:iam/role:Role",
        "aws:iam/instanceProfile:InstanceProfile",
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    ):
        assert counts[kind] == 1, kind
    assert "aws:autoscaling/group:Group" not in counts
    pg = one(recs, "placementGroup:PlacementGroup")
    assert pg.inputs["strategy"] == "cluster"
    lt = one(recs, "launchTemplate:LaunchTemplate")
    assert lt.inputs["placement"] == {"groupName": f"<{pg.name}>.name"}
    assert lt.inputs["instanceType"] == "p5.48xlarge"
    for inst in of_type(recs, "ec2/instance:Instance"):
        assert inst.inputs["launchTemplate"]["id"] == f"<{lt.name}>.id"
        assert inst.parent == lt.parent  # the node group component


def test_p5_launch_template_attaches_all_32_efa_interfaces_primary_first(tmp_path):
    lt = one(plan(tmp_path, AWS_TRAINING), "launchTemplate:LaunchTemplate")
    nics = lt.inputs["networkInterfaces"]
    assert len(nics) == 32
    primary = nics[0]
    assert (primary["networkCardIndex"], primary["deviceIndex"]) == (0, 0)
    assert primary["interfaceType"] == "efa"
    assert sorted(n["networkCardIndex"] for n in nics) == list(range(32))
    for n in nics[1:]:
        assert n["deviceIndex"] == 1
        assert n["interfaceType"] == "efa-only"
    sg = _nodes_sg(plan(tmp_path, AWS_TRAINING))
    assert all(n["securityGroups"] == [f"<{sg.name}>.id"] for n in nics)


@pytest.mark.parametrize("instance_type", ["p5.48xlarge", "p5en.48xlarge", "p4d.24xlarge"])
def test_efa_interface_count_follows_the_catalog(tmp_path, instance_type):
    doc = variant(AWS_TRAINING, **{"node_groups.0.instance_type": instance_type})
    lt = one(plan(tmp_path, doc), "launchTemplate:LaunchTemplate")
    want = int(load_aws_catalog().instance(instance_type).efa_interfaces.value)
    nics = lt.inputs["networkInterfaces"]
    assert len(nics) == want
    assert sum(n["interfaceType"] in ("efa", "efa-only") for n in nics) == want


def test_training_on_ethernet_gets_one_plain_interface(tmp_path):
    doc = variant(AWS_TRAINING, **{"network.fabric": "ethernet"})
    nics = one(plan(tmp_path, doc), "launchTemplate:LaunchTemplate").inputs["networkInterfaces"]
    assert len(nics) == 1
    assert nics[0]["interfaceType"] == "interface"


def test_efa_interfaces_refuse_more_devices_than_cards():
    with pytest.raises(ValueError, match="do not fit"):
        efa_interfaces(5, 4, "subnet", "sg")


def test_inference_is_an_autoscaling_group_without_placement_group_or_efa(tmp_path):
    recs = plan(tmp_path, AWS_INFERENCE)
    assert not of_type(recs, "placementGroup:PlacementGroup")
    assert not of_type(recs, "ec2/instance:Instance")
    asg = one(recs, "autoscaling/group:Group")
    sizes = [asg.inputs[k] for k in ("minSize", "desiredCapacity", "maxSize")]
    assert sizes == [1, 2, 6]
    assert asg.ignore_changes == ["desiredCapacity"]
    lt = one(recs, "launchTemplate:LaunchTemplate")
    assert "networkInterfaces" not in lt.inputs
    assert "placement" not in lt.inputs
    types = [n.get("interfaceType") for r in recs for n in r.inputs.get("networkInterfaces", [])]
    assert not {"efa", "efa-only"} & set(types)
    assert asg.inputs["launchTemplate"]["id"] == f"<{lt.name}>.id"


def _nodes_sg(recs):
    return next(
        r
        for r in of_type(recs, "securityGroup:SecurityGroup")
        if r.name.endswith("-sg") and "eice" not in r.name
    )


def _ingress(recs):
    return _nodes_sg(recs).inputs["ingress"]


def test_security_group_allows_itself_everything_and_ssh_from_the_endpoint_and_ssh_cidrs(
    tmp_path,
):
    doc = variant(AWS_TRAINING, **{"target.ssh_cidrs": ["10.20.0.0/16", "2001:db8::/32"]})
    recs = plan(tmp_path, doc)
    ingress = _ingress(recs)
    assert len(ingress) == 3
    own = next(r for r in ingress if r.get("self"))
    assert (own["protocol"], own["fromPort"], own["toPort"]) == ("-1", 0, 0)
    eice_sg = next(r for r in of_type(recs, "securityGroup:SecurityGroup") if "eice" in r.name)
    via = next(r for r in ingress if r.get("securityGroups"))
    assert via["securityGroups"] == [f"<{eice_sg.name}>.id"]
    assert (via["protocol"], via["fromPort"], via["toPort"]) == ("tcp", 22, 22)
    ssh = next(r for r in ingress if r.get("cidrBlocks"))
    assert (ssh["protocol"], ssh["fromPort"], ssh["toPort"]) == ("tcp", 22, 22)
    assert ssh["cidrBlocks"] == ["10.20.0.0/16"]
    assert ssh["ipv6CidrBlocks"] == ["2001:db8::/32"]
    egress = _nodes_sg(recs).inputs["egress"]
    assert any(r.get("self") and r["protocol"] == "-1" for r in egress)
    # The endpoint's group lets nothing in and only SSH to the nodes' subnet out.
    assert not eice_sg.inputs.get("ingress")
    (out,) = eice_sg.inputs["egress"]
    assert (out["protocol"], out["fromPort"], out["toPort"]) == ("tcp", 22, 22)
    assert out["cidrBlocks"] == ["10.0.0.0/17"]


def test_the_controller_reaches_private_nodes_through_an_instance_connect_endpoint(tmp_path):
    for doc in (AWS_TRAINING, AWS_INFERENCE, variant(AWS_TRAINING, **{"target.ssh_cidrs": []})):
        recs = plan(tmp_path, doc)
        eice = one(recs, "instanceConnectEndpoint:InstanceConnectEndpoint")
        nodes = next(s for s in of_type(recs, "ec2/subnet:Subnet") if s.name.endswith("-nodes"))
        assert eice.inputs["subnetId"] == f"<{nodes.name}>.id"
        assert eice.inputs["preserveClientIp"] is False
        configure = one(recs, "rackform:Configure")
        proxy = compile_effective(load_effective(write_blueprint(tmp_path, doc))).inventory["all"][
            "vars"
        ]["rackform_ssh_proxy"]
        assert proxy.startswith("aws ec2-instance-connect open-tunnel --region ")
        assert proxy.endswith("--instance-id {{ rackform_instance_id }}")
        # The stack's keys reach Configure (secret; known after up under the mocks).
        assert configure.inputs["access"] == "(known after up)"


def _open_to_world(ingress) -> bool:
    blocks = [c for r in ingress for c in r.get("cidrBlocks", []) + r.get("ipv6CidrBlocks", [])]
    return public_share(blocks) > 0.0001


def test_no_public_ingress(tmp_path):
    assert not _open_to_world(_ingress(plan(tmp_path, AWS_TRAINING)))
    assert not _open_to_world(_ingress(plan(tmp_path, AWS_INFERENCE)))


def test_nodes_subnet_is_in_the_blueprint_zone_and_gives_no_public_addresses(tmp_path):
    recs = plan(tmp_path, AWS_TRAINING)
    for subnet in of_type(recs, "ec2/subnet:Subnet"):
        assert subnet.inputs["availabilityZone"] == "us-east-1a"
        assert subnet.inputs["mapPublicIpOnLaunch"] is False
    nodes = next(s for s in of_type(recs, "ec2/subnet:Subnet") if s.name.endswith("-nodes"))
    lt = one(recs, "launchTemplate:LaunchTemplate")
    assert lt.inputs["networkInterfaces"][0]["subnetId"] == f"<{nodes.name}>.id"
    assert not any(n.get("associatePublicIpAddress") for n in lt.inputs["networkInterfaces"])


def test_every_taggable_aws_resource_carries_the_cluster_tags_and_its_name(tmp_path):
    # Launch templates are the exception: they carry what a node is, no cosmetic tag
    # (tests/targets/test_aws_churn.py).
    for doc in (AWS_TRAINING, AWS_INFERENCE):
        recs = plan(tmp_path, doc)
        want = {
            "rackform:cluster",
            "rackform:purpose",
            "rackform:environment",
            "rackform:owner",
            "rackform:idle-policy",
            "rackform:digest",
        }
        aws = [r for r in recs if r.type.startswith("aws:")]
        checked = 0
        for r in aws:
            if not taggable(r.type) or r.type.endswith("launchTemplate:LaunchTemplate"):
                continue
            raw = r.inputs.get("tags")
            assert raw, f"{r.type} {r.name} has no tags"
            tags = {t["key"]: t["value"] for t in raw} if isinstance(raw, list) else raw
            assert want <= set(tags), f"{r.name} lacks {want - set(tags)}"
            assert tags["Name"] == r.name
            assert tags["rackform:purpose"] == doc["purpose"]
            checked += 1
        untaggable = [r.type for r in aws if not taggable(r.type)]
        assert checked == len(aws) - len(untaggable) - 1, untaggable
        lt = one(recs, "launchTemplate:LaunchTemplate")
        kinds = {s["resourceType"] for s in lt.inputs["tagSpecifications"]}
        assert kinds == {"instance", "volume", "network-interface"}


def test_idle_policy_tag_reads_the_blueprint(tmp_path):
    vpc = one(plan(tmp_path, AWS_TRAINING), "ec2/vpc:Vpc")
    assert vpc.inputs["tags"]["rackform:idle-policy"] == "util-below=10/for=60m/action=destroy"


def test_tags_use_only_the_characters_every_aws_service_accepts(tmp_path):
    # IAM is the strictest: letters, digits, spaces and _ . : / = + - @ in tag values.
    for r in plan(tmp_path, AWS_TRAINING):
        for value in (r.inputs.get("tags") or {}).values():
            assert re.fullmatch(r"[\w\s.:/=+\-@]*", value), (r.type, value)


@pytest.mark.parametrize(
    ("market", "market_type", "reservation", "placement"),
    [
        ("on-demand", None, None, True),
        ("spot", "spot", None, True),
        ("capacity-block", "capacity-block", "cr-0123456789abcdef0", False),
        ("reservation", None, "cr-0123456789abcdef0", False),
    ],
)
def test_market(tmp_path, market, market_type, reservation, placement):
    doc = variant(AWS_TRAINING, **{"target.market": market})
    if reservation:
        doc["target"]["reservation_id"] = reservation
    recs = plan(tmp_path, doc)
    lt = one(recs, "launchTemplate:LaunchTemplate").inputs
    got_type = (lt.get("instanceMarketOptions") or {}).get("marketType")
    assert got_type == market_type
    if market == "spot":
        spot = lt["instanceMarketOptions"]["spotOptions"]
        assert spot["instanceInterruptionBehavior"] == "terminate"
    target = (lt.get("capacityReservationSpecification") or {}).get("capacityReservationTarget")
    assert (target or {}).get("capacityReservationId") == reservation
    assert bool(of_type(recs, "placementGroup:PlacementGroup")) is placement


def test_ami_from_filter_is_pinned_after_first_launch(tmp_path):
    recs = plan(tmp_path, AWS_TRAINING)
    lt = one(recs, "launchTemplate:LaunchTemplate")
    # The default: Canonical's plain Ubuntu 22.04, where the roles install everything.
    assert "ubuntu-jammy-22.04-amd64-server-*" in lt.inputs["imageId"]
    assert "099720109477" in lt.inputs["imageId"]
    # Pinned by the stack's ImagePin (its kind is its identity), not hidden by ignore_changes.
    pin = one(recs, "rackform:ImagePin")
    assert pin.inputs["image"] == "ubuntu-22.04"
    assert pin.inputs["image_id"] == lt.inputs["imageId"]
    assert lt.ignore_changes == []
    dlami = variant(AWS_TRAINING, **{"target.ami": {"image": "dlami-ubuntu-22.04"}})
    lt = one(plan(tmp_path, dlami), "launchTemplate:LaunchTemplate")
    assert "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)" in lt.inputs["imageId"]


def test_explicit_ami_is_used_as_is(tmp_path):
    doc = variant(AWS_TRAINING, **{"target.ami": {"id": "ami-0123456789abcdef0"}})
    lt = one(plan(tmp_path, doc), "launchTemplate:LaunchTemplate")
    assert lt.inputs["imageId"] == "ami-0123456789abcdef0"
    assert one(plan(tmp_path, doc), "rackform:ImagePin").inputs["image"] == "ami-0123456789abcdef0"


def test_instance_profile_has_ssm(tmp_path):
    recs = plan(tmp_path, AWS_TRAINING)
    role = one(recs, "iam/role:Role")
    assert "ec2.amazonaws.com" in role.inputs["assumeRolePolicy"]
    attach = one(recs, "iam/rolePolicyAttachment:RolePolicyAttachment")
    assert attach.inputs["policyArn"] == "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
    profile = one(recs, "iam/instanceProfile:InstanceProfile")
    assert profile.inputs["role"] == f"<{role.name}>.name"
    lt = one(recs, "launchTemplate:LaunchTemplate")
    assert lt.inputs["iamInstanceProfile"] == {"arn": f"<{profile.name}>.arn"}
    assert lt.inputs["metadataOptions"]["httpTokens"] == "required"


@pytest.mark.parametrize("doc", [AWS_TRAINING, AWS_INFERENCE], ids=["training", "inference"])
def test_the_nodes_metadata_answers_the_instance_itself_only(tmp_path, doc):
    # The user data carries the cluster's host key (docs/operations/security.md, "Boot
    # reports"): IMDSv2 only, one hop, so a container on a bridge network on a node (a second
    # hop) reads neither it nor the instance role's credentials.
    for lt in of_type(plan(tmp_path, doc), "launchTemplate:LaunchTemplate"):
        assert lt.inputs["metadataOptions"] == {
            "httpEndpoint": "enabled",
            "httpTokens": "required",
            "httpPutResponseHopLimit": 1,
        }


def test_instance_store_is_not_mapped(tmp_path):
    lt = one(plan(tmp_path, AWS_TRAINING), "launchTemplate:LaunchTemplate")
    devices = [m["deviceName"] for m in lt.inputs["blockDeviceMappings"]]
    assert devices == ["/dev/sda1"]  # root only: the NVMe instance store stays for nvme_raid
    assert all("virtualName" not in m for m in lt.inputs["blockDeviceMappings"])


def test_components_use_rackform_tokens_and_every_resource_has_a_parent(tmp_path):
    recs = plan(tmp_path, AWS_TRAINING)
    roots = [r for r in recs if r.parent is None]
    assert [r.type for r in roots] == ["rackform:cluster:Cluster"]
    for r in recs:
        if not r.custom:
            area_kind = r.type.split(":")
            assert area_kind[0] == "rackform" and len(area_kind) == 3, r.type


def test_protect_follows_the_blueprint(tmp_path):
    assert not any(r.protect for r in plan(tmp_path, AWS_TRAINING))
    protected = variant(AWS_TRAINING, **{"lifecycle.protect": True})
    assert all(r.protect for r in plan(tmp_path, protected))


def test_environment_override_changes_the_node_count(tmp_path):
    doc = variant(
        AWS_TRAINING, environments={"dev": {"node_groups": [{"name": "gpu", "count": 1}]}}
    )
    recs = plan(tmp_path, doc, env="dev")
    assert len(of_type(recs, "ec2/instance:Instance")) == 1
    assert all(r.name.startswith("t-train-dev") for r in recs)


def test_vpc_split():
    assert split_vpc("10.0.0.0/16") == ("10.0.0.0/17", "10.0.240.0/20")
    assert split_vpc("10.1.2.0/24") == ("10.1.2.0/25", "10.1.2.240/28")
    assert split_vpc("10.1.2.0/27") == ("10.1.2.0/28", "10.1.2.16/28")


@pytest.mark.parametrize("cidr", ["10.0.0.0/28", "10.0.0.0/32", "fd00::/48"])
def test_a_vpc_too_small_for_its_subnets_is_a_blueprint_error_before_any_program(tmp_path, cidr):
    # It used to pass `validate` and fail only inside the Pulumi program.
    doc = variant(AWS_TRAINING, **{"target.vpc_cidr": cidr})
    with pytest.raises(BlueprintError) as err:
        plan(tmp_path, doc)
    (p,) = [p for p in err.value.problems if p.path == "target.vpc_cidr"]
    assert "too small" in p.message and p.line is not None


@pytest.mark.parametrize(
    ("target", "first"),
    [
        ({}, True),  # a cluster placement group of its own
        ({"market": "reservation", "reservation_id": "cr-0123456789abcdef0"}, True),
        ({"rollout": {"strategy": "create-first"}}, False),  # the blueprint's choice
    ],
)
def test_training_instances_are_replaced_delete_first_where_capacity_is_bound(
    tmp_path, target, first
):
    doc = variant(AWS_TRAINING, target={**AWS_TRAINING["target"], **target})
    for instance in of_type(plan(tmp_path, doc), "ec2/instance:Instance"):
        assert instance.delete_before_replace is first


def test_inference_on_reserved_capacity_refreshes_without_extra_instances(tmp_path):
    doc = variant(
        AWS_INFERENCE,
        target={
            **AWS_INFERENCE["target"],
            "market": "reservation",
            "reservation_id": "cr-0123456789abcdef0",
        },
    )
    asg = one(plan(tmp_path, doc), "autoscaling/group:Group")
    prefs = asg.inputs["instanceRefresh"]["preferences"]
    # Two nodes, a budget of one (the default, max(1, 10%)): half stays in service.
    assert (prefs["minHealthyPercentage"], prefs["maxHealthyPercentage"]) == (50, 100)


def test_mid_rollout_the_previous_artifacts_nodes_serve_as_the_inventory():
    from rackform.targets.aws.nodes import serving_nodes

    # Configured with this artifact: only those.
    assert serving_nodes(["i-new"], ["10.0.0.9"], ["i-old", "i-new"], ["10.0.0.1", "10.0.0.9"]) == [
        ["i-new", "10.0.0.9", 22, "i-new"]
    ]
    # An instance refresh has just started: none carries the new artifact yet, the group still
    # serves from the old ones, and Configure sees them rather than an empty cluster.
    assert serving_nodes([], [], ["i-old"], ["10.0.0.1"]) == [["i-old", "10.0.0.1", 22, "i-old"]]


@pytest.mark.parametrize(
    ("count", "budget", "min_healthy"),
    [(10, 3, 70), (10, "20%", 80), (3, 1, 67), (1, None, 0), (40, None, 90)],
)
def test_an_instance_refresh_keeps_to_the_out_of_service_budget(
    tmp_path, count, budget, min_healthy
):
    """delete-first: no more nodes out at once than lifecycle.max_out_of_service, rounded to
    the safe side (3 nodes, 1 out: 67% must stay, so AWS keeps 3 x 0.67 -> 3 and replaces one)."""
    group = {**AWS_INFERENCE["node_groups"][0], "count": count, "max_count": max(count, 6)}
    lifecycle = {} if budget is None else {"max_out_of_service": budget}
    doc = variant(
        AWS_INFERENCE,
        target={
            **AWS_INFERENCE["target"],
            "market": "reservation",
            "reservation_id": "cr-0123456789abcdef0",
        },
        node_groups=[group],
        lifecycle=lifecycle,
    )
    asg = one(plan(tmp_path, doc), "autoscaling/group:Group")
    assert asg.inputs["instanceRefresh"]["preferences"]["minHealthyPercentage"] == min_healthy
