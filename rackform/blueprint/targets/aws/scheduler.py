"""The AWS target's part of the blueprint's `scheduler:` section: the stack creates Slurm's
controller instance, so no host of the blueprint is named the controller, its type is a small
EC2 type without GPUs, and the nodes' image carries a Slurm the slurm role supports. The rules
every target shares are the common schema's (`schema.scheduler`)."""

from __future__ import annotations

import re

from rackform.blueprint.schema.base import Violation
from rackform.blueprint.schema.scheduler import CONTROLLER_TYPE, INSTANCE_TYPE_PATTERN
from rackform.blueprint.targets.aws.catalog import load_aws_catalog
from rackform.blueprint.targets.aws.names import CONTROLLER_SUFFIX
from rackform.blueprint.targets.schema import Cluster
from rackform.catalog import Catalog

# The images whose Slurm the slurm role supports (the role's vars: 22.05 or newer;
# Ubuntu 24.04 ships 23.11, Ubuntu 22.04 21.08).
SLURM_IMAGES = ("ubuntu-24.04", "dlami-ubuntu-24.04")


def scheduler_rules(bp: Cluster, catalog: Catalog) -> list[Violation]:
    s = bp.scheduler
    if s is None or bp.purpose != "training":
        return []  # an inference cluster's scheduler is refused by the shared rules
    out = []
    image = bp.target.ami.image
    if image not in SLURM_IMAGES:
        out.append(
            Violation(
                ("target", "ami", "image"),
                f"Slurm needs Ubuntu 24.04 on the nodes (Slurm 23.11); {image} ships Slurm "
                "21.08, which cannot confine jobs under cgroup v2",
                "set target.ami.image: ubuntu-24.04 (or dlami-ubuntu-24.04)",
            )
        )
    if s.controller is not None:
        out.append(
            Violation(
                ("scheduler", "controller"),
                "on aws the controller is not a host: the stack creates its own instance, "
                f"{bp.name}-<environment>-{CONTROLLER_SUFFIX}, which runs slurmctld only",
                "remove controller (controller_instance_type sizes that instance, default "
                f"{CONTROLLER_TYPE})",
            )
        )
    t = s.controller_instance_type
    if t is not None and not re.fullmatch(INSTANCE_TYPE_PATTERN, t):
        out.append(
            Violation(
                ("scheduler", "controller_instance_type"),
                f"{t!r} is not an EC2 instance type name (family and generation, a period, a size)",
                f"use a name such as {CONTROLLER_TYPE} or c7i.xlarge",
            )
        )
    elif t is not None and t in load_aws_catalog().instances:
        # The catalog lists GPU types only, each far too dear to run slurmctld alone.
        out.append(
            Violation(
                ("scheduler", "controller_instance_type"),
                f"{t} is a GPU instance type; the controller runs slurmctld only and uses no GPU",
                f"use a small general-purpose type such as {CONTROLLER_TYPE}, or remove "
                "controller_instance_type",
            )
        )
    return out
