"""The baked node image on AWS (`image.bake`) under Pulumi's mock runtime: the EC2 Image Builder
resources, the launch templates on the image's AMI (and on nothing else when its build fails),
the AMI's tags, what the build component runs (never a per-node role), and the blueprint's
located errors for a bad `image` section."""

from __future__ import annotations

import gc
import json
import logging
import re
from typing import ClassVar

import pytest
import yaml
from planhelp import AWS_INFERENCE, AWS_TRAINING, BARE_METAL, of_type, one, plan, variant

from rackform.blueprint.loader import load_effective
from rackform.blueprint.problems import BlueprintError
from rackform.blueprint.targets.aws.image_fields import DEFAULT_BUILDER
from rackform.blueprint.targets.aws.names import asg_name
from rackform.boot.groups import bake_spec
from rackform.engine import compile_effective
from rackform.evidence.shipped import roles_hash
from rackform.paths import collection, site
from rackform.plan.bake import BAKED_TAGS, NEVER_BAKED
from rackform.stack import offline
from rackform.targets.aws.bootstrap import group_artifact
from rackform.targets.aws.node_image import (
    BAKE_SCRIPT,
    COMPONENT_DATA_LIMIT,
    component_document,
)

IMAGE = "aws:imagebuilder/image:Image"
TEMPLATE = "ec2/launchTemplate:LaunchTemplate"
BAKED = {**AWS_TRAINING, "image": {"bake": True}}


def _plan_of(tmp_path, doc, env=None):
    from planhelp import write_blueprint

    return compile_effective(load_effective(write_blueprint(tmp_path, doc), env))


def test_a_baked_blueprint_gets_the_image_builder_resources(tmp_path):
    recs = plan(tmp_path, BAKED)
    types = {r.type.split(":")[1] for r in recs if r.type.startswith("aws:imagebuilder/")}
    assert types == {
        "imagebuilder/component",
        "imagebuilder/imageRecipe",
        "imagebuilder/infrastructureConfiguration",
        "imagebuilder/distributionConfiguration",
        "imagebuilder/image",
    }
    assert not of_type(recs, "imagebuilder/imagePipeline:ImagePipeline")  # no scheduled rebuilds
    recipe = one(recs, "imagebuilder/imageRecipe:ImageRecipe")
    # On the pinned base image, with the nodes' root volume.
    assert "t-train-default-image" in recipe.dependencies
    assert recipe.inputs["parentImage"].startswith("<newest AMI named")
    assert recipe.inputs["blockDeviceMappings"][0]["ebs"]["volumeSize"] == 200
    image = one(recs, IMAGE)
    assert image.inputs["imageTestsConfiguration"] == {"imageTestsEnabled": False}
    assert "t-train-default-bootstrap-policy" in image.dependencies  # the artifact is readable


def test_without_bake_nothing_of_the_image_is_made(tmp_path):
    recs = plan(tmp_path, AWS_TRAINING)
    assert not [r for r in recs if "imagebuilder" in r.type or r.type.endswith("NodeImage")]
    assert not of_type(recs, "s3/bucket:Bucket")  # a training cluster has no artifact bucket


def test_the_launch_template_launches_the_images_ami_and_waits_for_it(tmp_path):
    recs = plan(tmp_path, BAKED)
    image = one(recs, IMAGE)
    for lt in of_type(recs, TEMPLATE):
        assert image.urn in lt.dependency_urns
        assert lt.inputs["imageId"] == offline.KNOWN_AFTER_UP  # the build's output


class BuiltMocks(offline.RecordingMocks):
    """The engine's answer once the image is built: its AMI (the mocks leave it unknown)."""

    def __init__(self):
        super().__init__()
        self.unknown = {k: v for k, v in self.unknown.items() if k != IMAGE}

    def new_resource(self, args):
        rid, state = super().new_resource(args)
        if args.typ == IMAGE:
            state["outputResources"] = [{"amis": [{"image": "ami-0baked00000000001"}]}]
        return rid, state


def test_the_built_ami_is_the_launch_templates_image(tmp_path, monkeypatch):
    monkeypatch.setattr(offline, "RecordingMocks", BuiltMocks)
    for doc in (BAKED, {**AWS_INFERENCE, "image": {"bake": True}}):
        (lt,) = of_type(plan(tmp_path, doc), TEMPLATE)
        assert lt.inputs["imageId"] == "ami-0baked00000000001"


class FailedBuildMocks(offline.RecordingMocks):
    """An image whose build fails (the Image's create is refused)."""

    registered: ClassVar[list[str]] = []

    def new_resource(self, args):
        FailedBuildMocks.registered.append(args.typ)
        if args.typ == IMAGE:
            raise RuntimeError("the image build failed")
        return super().new_resource(args)


def test_a_failed_build_fails_the_program_before_any_launch_template(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(offline, "RecordingMocks", FailedBuildMocks)
    FailedBuildMocks.registered = []
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(Exception, match="the image build failed"):
            plan(tmp_path, BAKED)
        gc.collect()
    # No task of the failed program left pending for the collector to finalize at some later
    # allocation: inside a parse of Python source, CPython 3.11 raised SystemError there ("AST
    # constructor recursion depth mismatch") in a later test.
    assert not [r for r in caplog.records if "Task was destroyed" in r.getMessage()]
    assert IMAGE in FailedBuildMocks.registered
    assert not [t for t in FailedBuildMocks.registered if t.endswith(TEMPLATE)]
    assert not [t for t in FailedBuildMocks.registered if t.endswith("ec2/instance:Instance")]


def test_the_ami_carries_the_cluster_tags_the_roles_hash_and_its_contents(tmp_path):
    recs = plan(tmp_path, BAKED)
    dist = one(recs, "imagebuilder/distributionConfiguration:DistributionConfiguration")
    (d,) = dist.inputs["distributions"]
    assert d["region"] == "us-east-1"
    tags = d["amiDistributionConfiguration"]["amiTags"]
    vpc = one(recs, "ec2/vpc:Vpc")
    assert {k: v for k, v in vpc.inputs["tags"].items() if k != "Name"}.items() <= tags.items()
    assert tags["rackform:roles"] == roles_hash(collection())
    contents = dict(p.split("=") for p in tags["rackform:image-contents"].split())
    assert contents["driver"] == "550" and contents["fabric"] == "efa"
    assert "torch" in contents
    for value in tags.values():  # what every AWS service takes (test_aws.py says which)
        assert re.fullmatch(r"[\w\s.:/=+\-@]*", value), value
        assert len(value) <= 256


def test_the_builder_has_a_gpu_the_ssm_and_image_builder_policies_and_the_stacks_network(
    tmp_path,
):
    recs = plan(tmp_path, BAKED)
    infra = one(recs, "imagebuilder/infrastructureConfiguration:InfrastructureConfiguration")
    assert infra.inputs["instanceTypes"] == [DEFAULT_BUILDER]
    assert infra.inputs["terminateInstanceOnFailure"] is True
    assert {"t-train-default-nodes", "t-train-default-sg"} <= set(infra.dependencies)
    policies = {
        r.inputs["policyArn"]
        for r in of_type(recs, "iam/rolePolicyAttachment:RolePolicyAttachment")
        if r.parent == "t-train-default-node-image"
    }
    assert policies == {
        "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
        "arn:aws:iam::aws:policy/EC2InstanceProfileForImageBuilder",
    }
    other = variant(BAKED, **{"image.builder_instance_type": "g5.xlarge"})
    infra = one(plan(tmp_path, other), "infrastructureConfiguration:InfrastructureConfiguration")
    assert infra.inputs["instanceTypes"] == ["g5.xlarge"]


def _site_tags() -> set[str]:
    """The tags of the site playbook's roles and tasks."""
    plays = yaml.safe_load(site().read_text())
    parts = ("roles", "pre_tasks", "tasks")
    return {t for p in plays for k in parts for r in p.get(k) or [] for t in r.get("tags", [])}


def test_the_build_runs_only_the_node_independent_roles(tmp_path):
    assert set(BAKED_TAGS) <= _site_tags()  # every baked tag is a role of the site playbook
    assert set(NEVER_BAKED) <= _site_tags()
    assert not set(BAKED_TAGS) & set(NEVER_BAKED)
    spec = bake_spec(_plan_of(tmp_path, BAKED))
    assert spec["image"]["tags"] == list(BAKED_TAGS)
    assert spec["vars"]["nccl_rdma_require_devices"] is False  # the builder has no EFA device
    assert "smoke_train_run" in spec["vars"] and spec["vars"]["smoke_train_run"] is False
    doc = yaml.safe_load(component_document("https://b.s3.us-east-1.amazonaws.com/k", "a" * 64))
    steps = doc["phases"][0]["steps"]
    assert [s["action"] for s in steps] == [
        "CreateFile", "ExecuteBash", "Reboot", "ExecuteBash", "ExecuteBash",
    ]  # fmt: skip
    text = json.dumps(doc)
    for tag in NEVER_BAKED:
        assert tag not in text.replace("nvme_raid_", "")  # nothing per node is named


def test_the_component_document_fits_and_carries_the_bake_script_untouched():
    text = component_document("https://b.s3.us-east-1.amazonaws.com/k", "a" * 64)
    assert len(text) <= COMPONENT_DATA_LIMIT
    script = BAKE_SCRIPT.read_text()
    assert "{{" not in script  # AWSTOE would read it as one of its variables
    (write,) = [
        s for s in yaml.safe_load(text)["phases"][0]["steps"] if s["action"] == "CreateFile"
    ]
    assert write["inputs"][0]["content"] == script


def test_a_joining_nodes_artifact_names_the_roles_its_image_should_hold(tmp_path):
    p = _plan_of(tmp_path, {**AWS_INFERENCE, "image": {"bake": True}})
    g = p.node_groups[0]
    spec = json.loads(_member(group_artifact(p, g, asg_name(p, g)).path, "bootstrap.json"))
    assert spec["image"]["roles"] == roles_hash(collection())
    assert spec["image"]["tags"] == list(BAKED_TAGS)
    plain = _plan_of(tmp_path, AWS_INFERENCE)
    spec = json.loads(_member(group_artifact(plain, g, asg_name(plain, g)).path, "bootstrap.json"))
    assert "image" not in spec


def _member(path, name):
    import gzip
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(path.read_bytes()))) as tar:
        return tar.extractfile(name).read()


def test_an_image_section_counts_in_the_digest(tmp_path):
    # Without one, a blueprint keeps the digest it had before the section existed (the example
    # blueprints' recorded digests: tests/blueprint/test_digest_stable.py).
    assert _plan_of(tmp_path, BAKED).digest != _plan_of(tmp_path, AWS_TRAINING).digest


def _problems(tmp_path, doc):
    with pytest.raises(BlueprintError) as err:
        _plan_of(tmp_path, doc)
    return {p.path: p for p in err.value.problems}


def test_bad_image_sections_are_located_errors(tmp_path):
    got = _problems(tmp_path, variant(BAKED, **{"image.builder_instance_type": "g6.xlarg"}))
    assert "unknown instance type 'g6.xlarg'" in got["image.builder_instance_type"].message
    assert got["image.builder_instance_type"].line is not None
    got = _problems(tmp_path, {**AWS_TRAINING, "image": {"builder_instance_type": "g5.xlarge"}})
    assert "only when the image is baked" in got["image.builder_instance_type"].message
    got = _problems(tmp_path, {**AWS_TRAINING, "image": {"bake": "sometimes"}})
    assert "image.bake" in got
    # The builder's type is AWS's (bare metal bakes a disk image here:
    # tests/targets/test_onprem_node_image.py).
    got = _problems(tmp_path, {**BARE_METAL, "image": {"builder_instance_type": "g6.xlarge"}})
    assert got["image.builder_instance_type"].message == (
        "image.builder_instance_type is for aws blueprints, not bare_metal"
    )
