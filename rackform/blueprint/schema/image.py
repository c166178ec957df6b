"""The blueprint's `image` section: whether what every node of the cluster installs alike is
baked into a machine image the nodes launch from, rather than installed on each node after it
boots. What each target adds to it (AWS: the builder's instance type) is the target's
(`TargetSchema.image_fields`); a target that builds no image refuses `bake`
(`TargetSchema.image_rules`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from rackform.blueprint.schema.base import Strict


class ImageSpec(Strict):
    """What every target's `image` section has."""

    bake: Annotated[
        bool,
        Field(
            description="Bake a node image: the driver and Fabric Manager, NCCL and the fabric "
            "libraries, DCGM and its exporter, Slurm's node packages (with a scheduler; no munge "
            "key) and the smoke job's torch are installed once, into "
            "a machine image the nodes launch from (AWS: EC2 Image Builder resources in the "
            "stack, built during `up` or by `rackform image build`); each node then does only "
            "its own part (drives, names, keys, mounts). The image records the roles' hash, and "
            "a node whose image does not match the blueprint's roles is configured in full."
        ),
    ] = False
