"""The shared_storage role's variables from the blueprint's data tier (storage.shared): what to
mount where, which host serves it (a host of the blueprint for a small site's NFS), and the
users and groups made with the same ids on every node."""

from __future__ import annotations

from typing import Any

from rackform.blueprint.schema.shared import SharedStorage

# FSx for Lustre's mount options ("Mounting from an Amazon EC2 instance" and "Mounting Amazon FSx
# automatically", FSx for Lustre user guide): relatime and flock; the role adds _netdev.
FSX_OPTIONS = ("relatime", "flock")


def shared_vars(shared: SharedStorage | None, interface: str) -> dict[str, Any]:
    """`shared_storage_*`; type none where the blueprint declares no shared tier (the role then
    does nothing). FSx's address and mount name come from the stack once it has created (or
    looked up) the file system (`role_outputs` of the AWS cluster); empty until then."""
    if shared is None:
        return {"shared_storage_type": "none"}
    users = [{"name": u.name, "uid": u.uid, "group": u.group or u.name} for u in shared.users]
    groups = [{"name": g.name, "gid": g.gid} for g in shared.groups]
    # A user without a group gets one of its own name with gid = uid (the schema checks that no
    # declared group has that gid).
    groups += [{"name": u.name, "gid": u.uid} for u in shared.users if u.group is None]
    common = {
        "shared_storage_mount": shared.mount,
        "shared_storage_holds": list(shared.holds),
        "shared_storage_users": users,
        "shared_storage_groups": groups,
    }
    if shared.fsx is not None:
        return {
            **common,
            "shared_storage_type": "lustre",
            "shared_storage_address": "",
            "shared_storage_export": "",
            "shared_storage_options": list(FSX_OPTIONS),
            "shared_storage_server_host": "",
            "shared_storage_interface": interface,
        }
    s = shared.server
    return {
        **common,
        "shared_storage_type": s.type,
        "shared_storage_address": s.address or "",
        "shared_storage_export": s.export,
        "shared_storage_options": [o for o in s.options.split(",") if o],
        "shared_storage_server_host": s.host or "",
        "shared_storage_interface": interface,
    }
