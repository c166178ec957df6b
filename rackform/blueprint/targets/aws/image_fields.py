"""What the AWS target adds to the blueprint's `image` section (the instance type EC2 Image
Builder builds the node image on), and its rules: the builder is a GPU type of the catalog, and the
field means something only where the image is baked."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from rackform.blueprint.schema.base import Strict, Violation, closest
from rackform.blueprint.targets.aws.catalog import load_aws_catalog

# The builder runs the roles as a node does, and the nvidia_driver role installs a driver only
# where it finds an NVIDIA GPU (its preflight refuses a host without one, and DCGM's checks
# need the driver loaded): so the builder has a GPU, the cheapest of the catalog's, one L4
# (g6.xlarge). The driver's kernel module is built for the image's kernel by DKMS, not for the
# GPU, so the image serves every type of the catalog (NVIDIA driver installation guide,
# "Package manager installation": the kernel module is built by DKMS against the running kernel).
DEFAULT_BUILDER = "g6.xlarge"


class AwsImageFields(Strict):
    builder_instance_type: Annotated[
        str | None,
        Field(
            description="AWS only: the GPU instance type EC2 Image Builder builds the node image on "
            f"(default {DEFAULT_BUILDER}, the catalog's cheapest GPU: the driver role installs a "
            "driver only where it finds a GPU). Any GPU type of the catalog."
        ),
    ] = None


def builder_type(image: Any) -> str:
    return (image.builder_instance_type if image is not None else None) or DEFAULT_BUILDER


def image_rules(bp: Any) -> list[Violation]:
    image = bp.image
    if image is None:
        return []
    out: list[Violation] = []
    named = image.builder_instance_type
    instances = load_aws_catalog().instances
    if named is not None:
        it = instances.get(named)
        if it is None:
            out.append(
                Violation(
                    ("image", "builder_instance_type"),
                    f"unknown instance type {named!r}",
                    closest(named, list(instances)),
                )
            )
        elif it.gpu_count < 1:
            out.append(
                Violation(
                    ("image", "builder_instance_type"),
                    f"{named} has no GPU: the driver role installs a driver only where it finds one",
                    f"use a GPU type, e.g. {DEFAULT_BUILDER}",
                )
            )
        if not image.bake:
            out.append(
                Violation(
                    ("image", "builder_instance_type"),
                    "builder_instance_type is used only when the image is baked",
                    "set image.bake: true, or remove builder_instance_type",
                )
            )
    return out
