"""The data tier (storage.shared) in the plan: what the cluster's GPUs read from it (preflight
compares it with the tier's throughput, validation with what each node measures), and the
shared_storage role's variables: what to mount where, which host serves it (a host of the
blueprint for a small site's NFS), and the users and groups made with the same ids on every
node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rackform.blueprint.schema.shared import SharedStorage
from rackform.plan.model import Basis, NodeGroupPlan


@dataclass(frozen=True)
class DataRate:
    tokens_per_s: float
    gbps: float  # GB/s the data loader reads


def data_rate(plan: Basis, groups: tuple[NodeGroupPlan, ...] | None = None) -> DataRate | None:
    """What the GPUs of `groups` (default: every group with GPUs) read while they train at the
    catalog's MFU: tokens/s = their bf16 dense peak x MFU / (FLOPs per parameter per token x
    parameters), times the workload's bytes per token. None without a training workload on GPUs."""
    w, c = plan.workload, plan.figures.cost
    groups = tuple(g for _, g in plan.gpu_groups) if groups is None else groups
    groups = tuple(g for g in groups if g.has_gpus)  # a CPU-only group reads nothing to size
    if not plan.training or w is None or not groups:
        return None
    peak = sum(g.gpus * g.gpu.bf16_dense_tflops.value for g in groups) * 1e12
    tokens = peak * c.mfu_fraction.value / (c.flops_per_param_token.value * w.model_params_b * 1e9)
    return DataRate(tokens, tokens * w.read_bytes_per_token / 1e9)


# EFS's recommended NFS mount options ("Recommended NFS mount settings", EFS user guide): NFS 4.1,
# 1 MiB reads and writes, hard, a 60 s timeout, 2 retransmissions, noresvport (a new source port
# when the connection is re-made, so a network recovery event keeps the mount).
EFS_OPTIONS = ("rsize=1048576", "wsize=1048576", "timeo=600", "retrans=2", "noresvport")
EFS_NFS_VERSION = "4.1"
# FSx for Lustre's mount options ("Mounting from an Amazon EC2 instance" and "Mounting Amazon FSx
# automatically", FSx for Lustre user guide): relatime and flock; the role adds _netdev.
FSX_OPTIONS = ("relatime", "flock")


def shared_vars(shared: SharedStorage | None, interface: str) -> dict[str, Any]:
    """`shared_storage_*`; type none where the blueprint declares no shared tier (the role then
    does nothing). FSx's address and mount name come from the stack once it has created (or
    looked up) the file system (`role_outputs` of the AWS cluster), as does EFS's DNS name;
    empty until then."""
    if shared is None:
        return {"shared_storage_type": "none"}
    users = [{"name": u.name, "uid": u.uid, "group": u.group or u.name} for u in shared.users]
    groups = [{"name": g.name, "gid": g.gid} for g in shared.groups]
    # A user without a group gets one of its own name with gid = uid (the schema checks that no
    # declared group has that gid).
    groups += [{"name": u.name, "gid": u.uid} for u in shared.users if u.group is None]
    out = {
        "shared_storage_mount": shared.mount,
        "shared_storage_holds": list(shared.holds),
        "shared_storage_users": users,
        "shared_storage_groups": groups,
        "shared_storage_interface": interface,
        # FSx's and EFS's DNS names come from the stack (`role_outputs`); a server names its own.
        "shared_storage_address": "",
        "shared_storage_server_host": "",
    }
    if shared.fsx is not None:
        return {
            **out,
            "shared_storage_type": "lustre",
            "shared_storage_export": "",
            "shared_storage_options": list(FSX_OPTIONS),
        }
    if shared.efs is not None:  # the export is the file system's root
        return {
            **out,
            "shared_storage_type": "nfs",
            "shared_storage_export": "/",
            "shared_storage_options": list(EFS_OPTIONS),
            "shared_storage_nfs_version": EFS_NFS_VERSION,
        }
    s = shared.server
    return {
        **out,
        "shared_storage_type": s.type,
        "shared_storage_address": s.address or "",
        "shared_storage_export": s.export,
        "shared_storage_options": [o for o in s.options.split(",") if o],
        "shared_storage_nfs_version": s.nfs_version,
        "shared_storage_server_host": s.host or "",
    }
