"""What a baked node image holds: the site playbook's roles that install the same thing on every
node of a cluster, run once on an image builder instead of on each node, and what the image
records of them (`/etc/rackform/image.json`, and on AWS the AMI's tags). Each target that builds
images (AWS: its EC2 Image Builder resources) runs the roles by these tags; a node's boot
compares the record with its blueprint (`boot.image_check`).

Never baked: what differs from node to node or needs the cluster around it: the checkpoint array
from the node's own drives (nvme_raid), the shared tier's mounts (shared_storage), and Slurm's
configuration (its role checks that the host is a node of the cluster's slurm.conf, writes it
and gives the node the controller's munge key). Slurm's node packages are baked
(`slurm_packages`, a task of the site playbook's GPU play that installs what the slurm role
installs on a node, where the blueprint has a scheduler), with no munge key left in the image."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The site playbook's tags (roles, and slurm_packages a task) a bake runs, in the playbook's
# order. smoke_train installs the smoke job's torch environment on every cluster: a training
# cluster's through the role, a serving cluster's through the play that gives its nodes that
# environment alone (the serving smoke job runs in it), so the record's smoke_train and torch are
# true of either image.
BAKED_TAGS = ("nvidia_driver", "nccl_rdma", "dcgm", "slurm_packages", "smoke_train")
NEVER_BAKED = ("nvme_raid", "shared_storage", "slurm")

# What needs the cluster's GPUs on the builder: the driver's role installs a driver only where it
# finds an NVIDIA GPU (its preflight refuses a host without one where GPUs are expected), and
# DCGM's checks need the driver loaded. A builder without a GPU (the local disk-image builder
# for bare metal and colocation, a QEMU VM: `testbed.builder`) leaves these to each
# node's first boot; the image's record says which tags it holds, and a node runs the others.
NEEDS_GPU = ("nvidia_driver", "dcgm")

# The builder is no node of the cluster: it has a GPU for the driver to find, but no fabric
# device (an EFA interface exists only on the cluster's instance types), so the nccl_rdma role
# installs the fabric's libraries without checking for the device; the nodes' own run checks it.
# `rackform_image_bake` runs what only a bake runs (Slurm's node packages, without a munge key).
BUILD_VARS: Mapping[str, Any] = {"nccl_rdma_require_devices": False, "rackform_image_bake": True}

# What the image holds, by the role variable that names its version (what image.json and the
# image's tags record).
CONTENTS = (
    ("driver", "nvidia_driver_branch"),
    ("cuda", "nvidia_driver_cuda_version"),
    ("nccl", "nccl_rdma_nccl_version"),
    ("fabric", "nccl_rdma_fabric"),
    ("dcgm", "dcgm_version"),
    ("torch", "smoke_train_torch_version"),
)


def contents(variables: Mapping[str, Any]) -> dict[str, str]:
    """What the image holds, from the roles' variables (those the blueprint sets)."""
    return {k: str(variables[v]) for k, v in CONTENTS if variables.get(v) not in (None, "")}


def contents_line(held: Mapping[str, str]) -> str:
    """One line of it, for a tag: `driver=550 nccl=2.21.5 ...`."""
    return " ".join(f"{k}={v}" for k, v in held.items())


def baked_tags(gpu_builder: bool, expects_gpus: bool) -> tuple[str, ...]:
    """The tags a bake runs: every baked tag, but those that need a GPU where the builder has
    none and the cluster's nodes have GPUs (on a GPU-less cluster those roles install nothing,
    on the builder as on the nodes)."""
    if gpu_builder or not expects_gpus:
        return BAKED_TAGS
    return tuple(t for t in BAKED_TAGS if t not in NEEDS_GPU)


def image_record(
    roles: str, variables: Mapping[str, Any], tags: tuple[str, ...] = BAKED_TAGS
) -> dict[str, Any]:
    """What the bake writes into the image (and a node's artifact carries to compare with it):
    the roles' hash (`shipped.roles_hash`), the tags baked and what they installed."""
    return {"roles": roles, "tags": list(tags), "contents": contents(variables)}
