"""A node group's artifact, on any target: the manifest of what its nodes run at boot (the
group's configuration variables, its inventory group, the GPUs its checks expect, what a baked
image should hold) built into the pinned artifact (`artifact.build_artifact`). A target adds
what is its own (`aws`: the calls a joining node makes there); the rest is the same everywhere,
so the same blueprint gives its nodes the same configuration whoever serves the artifact."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rackform.acceptance.argv import serving_job_argv
from rackform.boot.artifact import Artifact, build_artifact, manifest
from rackform.catalog import load_catalog
from rackform.evidence.shipped import roles_hash
from rackform.paths import cache_dir, collection
from rackform.plan.bake import BAKED_TAGS, BUILD_VARS, baked_tags, image_record
from rackform.plan.inventory import configure_vars, group_name
from rackform.plan.model import NodeGroupPlan, Plan, thaw
from rackform.plan.serving_vars import SERVING_VAR


def group_spec(
    plan: Plan, group: NodeGroupPlan, aws: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The manifest (`bootstrap.json`) of `group`'s artifact: on a serving cluster with a
    workload, the serving smoke job's arguments for the group (`serving_job`)."""
    variables = thaw(plan.group_vars)
    spec = manifest(
        configure_vars(variables),
        group_name(group.name),
        plan.ssh_user,
        aws=aws,
        expect_gpus=group.gpus_per_node,
        serving_job=serving_job(variables, group.name),
    )
    if plan.baked:
        # What the node's image should hold, which its boot compares with the image's record
        # (`image_check`).
        spec["image"] = expected_image(spec["vars"])
    return spec


def serving_job(variables: Mapping[str, Any], group: str) -> list[str] | None:
    """The serving smoke job's arguments for `group` (as the blueprint names it), from the
    plan's `rackform_serving_smoke`; None where the cluster has no serving workload."""
    entry = (variables.get(SERVING_VAR) or {}).get(group)
    return serving_job_argv(entry, load_catalog()) if entry else None


def expected_image(
    variables: Mapping[str, Any], tags: tuple[str, ...] = BAKED_TAGS
) -> dict[str, Any]:
    """The record a node image built from this collection with `variables` holds: what the
    builder writes into it, and what a node's artifact carries to compare with it."""
    return image_record(roles_hash(collection()), variables, tags)


def bake_spec(
    plan: Plan,
    *,
    gpu_builder: bool = True,
    extra_vars: Mapping[str, Any] | None = None,
    pip_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The bake artifact's bootstrap.json, for the image builder of any target: the cluster's
    configuration variables with the builder's own (the plan's `BUILD_VARS`) and `extra_vars` (a
    build's `-x`), in an inventory group of the image's, and the record the image keeps
    (`image`: the tags this builder bakes, `baked_tags`)."""
    variables = {**configure_vars(thaw(plan.group_vars)), **BUILD_VARS, **(extra_vars or {})}
    spec = manifest(variables, group_name("image"), plan.ssh_user, pip_args=pip_args)
    expects = any(g.gpus_per_node for g in plan.node_groups)
    spec["image"] = expected_image(variables, baked_tags(gpu_builder, expects))
    return spec


def group_artifact(
    plan: Plan, group: NodeGroupPlan, aws: Mapping[str, Any] | None = None
) -> Artifact:
    """`group`'s artifact, built once into the cache and reused."""
    return build_artifact(group_spec(plan, group, aws), cache_dir() / "artifacts")
