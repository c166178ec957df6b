"""`storage.shared`: the cluster's data tier, a file system every node mounts for datasets,
checkpoints that must outlive a node, and home directories. Either an existing NFS or Lustre
server (every target), or FSx for Lustre, which the stack creates or names by id (AWS: which
kinds a target offers is its schema's rule, `TargetSchema.shared_kinds`).

FSx for Lustre's rules, from the FSx API reference (CreateFileSystem, CreateFileSystemLustreConfiguration):
StorageCapacity for SSD deployment types is 1,200 GiB, 2,400 GiB or a multiple of 2,400 GiB
(which its guide calls 1.2 and 2.4 TiB, the unit `storage_tib` takes and throughput is per);
PerUnitStorageThroughput is 125, 250, 500 or 1000 MB/s per TiB for PERSISTENT_2 and 50, 100 or
200 for PERSISTENT_1; SCRATCH_2 has no per-unit setting and gives 200 MB/s per TiB of baseline
throughput (https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystemLustreConfiguration.html)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from rackform.blueprint.schema.base import Strict, Violation, check, repeated
from rackform.blueprint.schema.names import (
    NEW_USER,
    AbsolutePath,
    Address,
    Export,
    MountOptions,
    NodeName,
)
from rackform.blueprint.schema.object_tier import S3_BUCKET

Holds = Literal["datasets", "checkpoints", "home"]
Deployment = Literal["PERSISTENT_2", "PERSISTENT_1", "SCRATCH_2"]
# MB/s per TiB each deployment type offers (the FSx API reference, above); SCRATCH_2's is fixed.
PER_TIB: dict[str, tuple[int, ...]] = {
    "PERSISTENT_2": (125, 250, 500, 1000),
    "PERSISTENT_1": (50, 100, 200),
    "SCRATCH_2": (200,),
}
# An existing AWS file system (FSx or EFS) to mount instead of creating one.
FileSystemId = Annotated[
    str | None,
    Field(
        description="An existing file system to mount instead of creating one.",
        pattern=r"^fs-[0-9a-f]{8,17}$",
    ),
]


class SharedServer(Strict):
    """A file server the cluster's nodes mount that rackform does not create."""

    type: Annotated[Literal["nfs", "lustre"], Field(description="The file system's protocol.")]
    address: Annotated[
        Address | None,
        Field(
            description="The server's IP address or host name (for Lustre: the MGS). With `host`, leave it out: the nodes reach that host at its address on the fabric's first interface."
        ),
    ] = None
    host: Annotated[
        NodeName | None,
        Field(
            description="NFS only, for small sites: a host of this blueprint that serves the export itself (rackform installs the NFS server there, exports the path to the cluster's network, and the host uses the path directly)."
        ),
    ] = None
    export: Annotated[
        Export,
        Field(
            description="What to mount: the NFS export's path (e.g. /export/data), or the Lustre file system name (e.g. lustre).",
        ),
    ]
    options: Annotated[
        MountOptions,
        Field(
            description="Mount options beyond rackform's, comma-separated (e.g. nconnect=8 for NFS)."
        ),
    ] = ""
    nfs_version: Annotated[
        Literal["4.2", "4.1", "4.0", "3"],
        Field(
            description="NFS only: the protocol version the server speaks (4.2 unless it is older)."
        ),
    ] = "4.2"
    read_gbps: Annotated[
        float | None,
        Field(
            description="What the server delivers to the whole cluster reading at once, in GB/s (measured or the vendor's figure): the data-loading check needs it.",
            gt=0,
        ),
    ] = None
    write_gbps: Annotated[
        float | None,
        Field(
            description="...and writing at once, in GB/s: the shared checkpoint check needs it.",
            gt=0,
        ),
    ] = None

    @model_validator(mode="after")
    def _where(self) -> SharedServer:
        out = []
        if self.address is None and self.host is None:
            out.append(Violation(
                ("address",), "the nodes need the server's address",
                "give address, or host: a host of this blueprint that serves it",
            ))  # fmt: skip
        if self.host is not None and self.type != "nfs":
            out.append(Violation(
                ("host",), "rackform serves only NFS from a host of the blueprint",
                "name an existing Lustre file system's MGS in address",
            ))  # fmt: skip
        if self.type == "nfs" and not self.export.startswith("/"):
            out.append(Violation(
                ("export",), f"{self.export!r} is no path on {self.host or self.address}",
                "give the export's absolute path, e.g. /srv/shared",
            ))  # fmt: skip
        check(out)
        return self


class SharedUser(Strict):
    """A user with the same id on every node: shared home directories and Slurm need it."""

    name: Annotated[
        str,
        Field(description="Login name.", pattern=NEW_USER),
    ]
    uid: Annotated[
        int, Field(description="User id, the same on every node (1000-59999).", ge=1000, le=59999)
    ]
    group: Annotated[
        str | None,
        Field(
            description="Primary group: one of storage.shared.groups; none: a group of the user's own name with gid = uid."
        ),
    ] = None


class SharedGroup(Strict):
    name: Annotated[str, Field(description="Group name.", pattern=NEW_USER)]
    gid: Annotated[
        int, Field(description="Group id, the same on every node (1000-59999).", ge=1000, le=59999)
    ]


class FsxLustre(Strict):
    """FSx for Lustre: created by the stack in the nodes' subnet, or an existing one by id."""

    file_system_id: FileSystemId = None
    deployment: Annotated[
        Deployment, Field(description="Deployment type (PERSISTENT_2 keeps data across failures).")
    ] = "PERSISTENT_2"
    storage_tib: Annotated[
        float,
        Field(description="Storage capacity in TiB: 1.2, 2.4 or a multiple of 2.4.", gt=0),
    ] = 2.4
    mbps_per_tib: Annotated[
        int | None,
        Field(
            description="Throughput per TiB of storage (MB/s): PERSISTENT_2 125/250/500/1000, PERSISTENT_1 50/100/200; SCRATCH_2 has 200 and takes none. Default: the deployment's lowest.",
        ),
    ] = None
    retain: Annotated[
        bool,
        Field(
            description="Keep the file system and its data when the cluster goes (datasets outlive clusters): it lives in a stack of its own, <stack>-data, with the VPC, subnet and security groups it sits in, all protected, which `rackform destroy` and reap's destroy never destroy (`rackform destroy --data` does). false: it goes with the cluster's stack.",
        ),
    ] = True
    import_path: Annotated[
        str | None,
        Field(
            description="The S3 bucket (and prefix) that holds the datasets, linked to the file system (a data repository association).",
            pattern=rf"^s3://{S3_BUCKET}(/\S*)?$",
        ),
    ] = None

    @field_validator("storage_tib")
    @classmethod
    def _capacity(cls, v: float) -> float:
        # The API counts GiB: 1,200, 2,400 or a multiple of 2,400 (its "1.2 TiB" is 1,200 GiB).
        gib = v * 1000
        if abs(gib - round(gib)) > 1e-6 or not (round(gib) == 1200 or round(gib) % 2400 == 0):
            raise ValueError(
                f"{v:g} TiB is not an FSx for Lustre SSD capacity: use 1.2, 2.4 or a multiple of 2.4"
            )
        return v

    @model_validator(mode="after")
    def _throughput(self) -> FsxLustre:
        offered = PER_TIB[self.deployment]
        if self.mbps_per_tib is not None and self.mbps_per_tib not in offered:
            check([Violation(
                ("mbps_per_tib",),
                f"{self.deployment} offers {', '.join(map(str, offered))} MB/s per TiB, not"
                f" {self.mbps_per_tib}",
                "leave it out (SCRATCH_2 has a fixed 200)" if self.deployment == "SCRATCH_2"
                else f"use one of {', '.join(map(str, offered))}",
            )])  # fmt: skip
        return self

    @property
    def per_tib(self) -> int:
        return self.mbps_per_tib or PER_TIB[self.deployment][0]

    @property
    def gbps(self) -> float:
        """The file system's throughput in GB/s: capacity x per-unit throughput."""
        return self.storage_tib * self.per_tib / 1000


class Efs(Strict):
    """Amazon EFS (AWS), for home directories and code: created by the stack with a mount target
    in the nodes' subnet, or an existing one by id (reachable from the nodes' subnet already)."""

    file_system_id: FileSystemId = None
    throughput_mode: Annotated[
        Literal["elastic", "bursting"],
        Field(
            description="elastic: throughput scales with the load, billed per GB transferred; bursting: grows with the data stored."
        ),
    ] = "elastic"
    retain: Annotated[
        bool,
        Field(
            description="Keep the file system and its data when the cluster goes: it lives in a stack of its own, <stack>-data, with the network its mount target sits in, all protected, which `rackform destroy` and reap's destroy never destroy (`rackform destroy --data` does). false: it goes with the cluster's stack."
        ),
    ] = True
    read_gbps: Annotated[
        float | None,
        Field(
            description="What it delivers to the cluster reading at once (GB/s), for the data-loading check; EFS's depends on its mode and load.",
            gt=0,
        ),
    ] = None
    write_gbps: Annotated[
        float | None,
        Field(description="...and writing at once (GB/s), for the checkpoint check.", gt=0),
    ] = None


class SharedStorage(Strict):
    mount: Annotated[AbsolutePath, Field(description="Where every node mounts it.")] = "/shared"
    holds: Annotated[
        tuple[Holds, ...],
        Field(
            description="What lives there: datasets (the data-loading check reads at the GPUs' rate), checkpoints (written there, checked against its write throughput), home.",
            min_length=1,
        ),
    ] = ("datasets",)
    server: Annotated[
        SharedServer | None, Field(description="An existing NFS or Lustre server.")
    ] = None
    fsx: Annotated[FsxLustre | None, Field(description="FSx for Lustre (AWS).")] = None
    efs: Annotated[
        Efs | None, Field(description="Amazon EFS (AWS): home directories and code.")
    ] = None
    users: Annotated[
        tuple[SharedUser, ...],
        Field(
            description="Users made with the same uid on every node (with `home` in holds, their home directories are on the shared tier)."
        ),
    ] = ()
    groups: Annotated[
        tuple[SharedGroup, ...], Field(description="Groups made with the same gid on every node.")
    ] = ()

    @field_validator("mount")
    @classmethod
    def _mount(cls, v: str) -> str:
        if v in ("/", "/boot", "/usr", "/var", "/etc", "/home") or ".." in v.split("/"):
            raise ValueError(
                f"{v!r} is not a safe mount point; use a dedicated path such as /shared"
            )
        return v.rstrip("/") or v

    @model_validator(mode="after")
    def _one(self) -> SharedStorage:
        out = []
        given = [k for k in ("server", "fsx", "efs") if getattr(self, k) is not None]
        if len(given) != 1:
            out.append(Violation(
                (given[-1],) if given else (),
                "give exactly one of server (an NFS or Lustre server), fsx or efs (AWS)",
                "keep the one the cluster mounts",
            ))  # fmt: skip
        out += [
            Violation(("holds", i), f"{self.holds[i]!r} is named twice", "name it once")
            for i in repeated(self.holds)
        ]
        out += self._id_rules()
        check(out)
        return self

    def _id_rules(self) -> list[Violation]:
        """Names and ids once each; a user's group declared. A user without a group gets a
        group of its own name with gid = uid, which must not clash with a declared group."""
        out = [
            Violation((f, i, k), f"{k} {getattr(items[i], k)!r} is given twice", "give each once")
            for f, items, keys in (
                ("users", self.users, ("name", "uid")),
                ("groups", self.groups, ("name", "gid")),
            )
            for k in keys
            for i in repeated(getattr(x, k) for x in items)
        ]
        groups = {g.name: g.gid for g in self.groups}
        gids = {g.gid: g.name for g in self.groups}
        for i, u in enumerate(self.users):
            if u.group is not None and u.group not in groups:
                out.append(Violation(
                    ("users", i, "group"), f"{u.group!r} is not one of storage.shared.groups",
                    f"declare it in groups, or leave group out for a group named {u.name}",
                ))  # fmt: skip
            elif u.group is None and gids.get(u.uid, u.name) != u.name:
                out.append(Violation(
                    ("users", i, "group"),
                    f"{u.name}'s own group would take gid {u.uid}, which is {gids[u.uid]}'s",
                    f"set group: {gids[u.uid]}, or give {u.name} another uid",
                ))  # fmt: skip
        return out

    @property
    def kind(self) -> str:
        return "fsx" if self.fsx is not None else "efs" if self.efs is not None else "server"

    @property
    def read_gbps(self) -> float | None:
        if self.fsx is not None:
            return self.fsx.gbps
        return (self.efs or self.server).read_gbps

    @property
    def write_gbps(self) -> float | None:
        if self.fsx is not None:
            return self.fsx.gbps
        return (self.efs or self.server).write_gbps

    def describe(self) -> str:
        if self.fsx is not None:
            f = self.fsx
            return f"FSx for Lustre {f.deployment}, {f.storage_tib:g} TiB x {f.per_tib} MB/s/TiB"
        if self.efs is not None:
            return f"EFS {self.efs.file_system_id or '(created by the stack)'}, {self.efs.throughput_mode}"
        s = self.server
        return f"{s.type.upper()} {s.address or s.host}:{s.export}"
