"""Finding the data tier's pieces that outlived their stack's state, by their tags, so `rackform
up` imports them into the data tier's stack instead of creating a second file system.

When: the data tier's stack does not hold a piece of the plan's data layout at its first `up`, or
after its state was lost (`pulumi stack rm --force`, a backend moved), or after a destroy from
before the data tier had its own stack left a retained file system behind. The pieces carry the
cluster's tags (`rackform:cluster`, `rackform:environment`) and their logical name as their `Name`
tag, which is how they are found; two with the same tags are refused, never guessed between.

Each answer is the id Pulumi's `import` option takes for its type (pulumi-aws's resource docs,
"Import": `vpc-...`, `subnet-...`, `sg-...`, an FSx file system's `fs-...`, a data repository
association's `dra-...`, an EFS file system's `fs-...`, a mount target's `fsmt-...`); a security
group also gives its name (`data_tier.Kept.args`). boto3 is imported where it is used (the deploy
extra); it is tested against moto's server on loopback, and against a stand-in where moto has no
answer."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rackform.plan.model import Plan
from rackform.plan.targets.aws.data_layout import Piece
from rackform.stack import data_stack
from rackform.targets.aws.api import aws_errors, boto3_client, one_line, tags_of

# States of a file system that is there to adopt (FSx API reference, FileSystem.Lifecycle; EFS
# API reference, FileSystemDescription.LifeCycleState): not one on its way out.
FSX_GONE = ("DELETING", "FAILED")
EFS_GONE = ("deleting", "deleted", "error")


class LookupFailed(data_stack.LookupFailed):
    """The pieces could not be looked for, or the answer is ambiguous (one line)."""


class Finder:
    """`client(service, region)`: a boto3 client (boto3_client but for tests)."""

    def __init__(self, client: Callable[[str, str], Any] = boto3_client):
        self._factory = client
        self._clients: dict[str, Any] = {}

    def _client(self, service: str, plan: Plan):
        if service not in self._clients:
            self._clients[service] = self._factory(service, plan.target.region)
        return self._clients[service]

    def find(self, plan: Plan, wanted: Sequence[Piece]) -> dict[str, dict[str, str]]:
        """{logical name: {"id": ..., ("name": ...)}} for each piece of `wanted` found in AWS."""
        try:
            return self._find(plan, wanted)
        except aws_errors() as exc:
            raise LookupFailed(
                f"could not look in AWS for what {plan.data_stack} does not hold: {one_line(exc)}"
            ) from None

    def _find(self, plan: Plan, wanted: Sequence[Piece]) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for piece in wanted:
            got = getattr(self, "_" + piece.lookup.replace("-", "_"))(plan, piece, found)
            if len(got) > 1:
                ids = ", ".join(sorted(g["id"] for g in got))
                raise LookupFailed(
                    f"{len(got)} resources carry the tags of {piece.name} ({ids}): keep one "
                    "(delete or retag the others), then run `rackform up` again"
                )
            if got:
                found[piece.name] = got[0]
        return found

    def _ec2_filters(self, plan: Plan, piece: Piece) -> list[dict[str, Any]]:
        tags = plan.tag_map
        return [
            {"Name": f"tag:{k}", "Values": [v]}
            for k, v in (
                ("Name", piece.name),
                ("rackform:cluster", tags["rackform:cluster"]),
                ("rackform:environment", tags["rackform:environment"]),
            )
        ]

    def _vpc(self, plan, piece, _found):
        vpcs = self._client("ec2", plan).describe_vpcs(Filters=self._ec2_filters(plan, piece))
        return [{"id": v["VpcId"]} for v in vpcs["Vpcs"]]

    def _subnet(self, plan, piece, _found):
        ec2 = self._client("ec2", plan)
        return [
            {"id": s["SubnetId"]}
            for s in ec2.describe_subnets(Filters=self._ec2_filters(plan, piece))["Subnets"]
        ]

    def _security_group(self, plan, piece, _found):
        ec2 = self._client("ec2", plan)
        groups = ec2.describe_security_groups(Filters=self._ec2_filters(plan, piece))
        return [{"id": g["GroupId"], "name": g["GroupName"]} for g in groups["SecurityGroups"]]

    def _ours(self, plan: Plan, piece: Piece, tags: dict[str, str]) -> bool:
        mine = plan.tag_map
        return (
            tags.get("Name") == piece.name
            and tags.get("rackform:cluster") == mine["rackform:cluster"]
            and tags.get("rackform:environment") == mine["rackform:environment"]
        )

    def _fsx(self, plan, piece, _found):
        # DescribeFileSystems takes no tag filter: every file system is read and its tags
        # compared (FSx API reference, DescribeFileSystems; FileSystem.Tags).
        pages = self._client("fsx", plan).get_paginator("describe_file_systems").paginate()
        return [
            {"id": fs["FileSystemId"]}
            for page in pages
            for fs in page["FileSystems"]
            if fs.get("FileSystemType") == "LUSTRE"
            and fs.get("Lifecycle") not in FSX_GONE
            and self._ours(plan, piece, tags_of(fs))
        ]

    def _datasets(self, plan, piece, _found):
        answer = self._client("fsx", plan).describe_data_repository_associations()
        return [
            {"id": a["AssociationId"]}
            for a in answer.get("Associations", [])
            if a.get("Lifecycle") not in FSX_GONE and self._ours(plan, piece, tags_of(a))
        ]

    def _efs(self, plan, piece, _found):
        pages = self._client("efs", plan).get_paginator("describe_file_systems").paginate()
        return [
            {"id": fs["FileSystemId"]}
            for page in pages
            for fs in page["FileSystems"]
            if fs.get("LifeCycleState") not in EFS_GONE and self._ours(plan, piece, tags_of(fs))
        ]

    def _efs_mount(self, plan, piece, found):
        # A mount target carries no tags: it is the found file system's, in the found subnet
        # (EFS API reference, DescribeMountTargets). Without both, it is created anew.
        fs = found.get(piece.name.removesuffix("-mount"))
        subnet = found.get(f"{plan.stack}-nodes")
        if fs is None or subnet is None:
            return []
        answer = self._client("efs", plan).describe_mount_targets(FileSystemId=fs["id"])
        return [
            {"id": m["MountTargetId"]}
            for m in answer["MountTargets"]
            if m.get("SubnetId") == subnet["id"] and m.get("LifeCycleState") not in EFS_GONE
        ]


def described(found: dict[str, dict[str, str]], pieces: Iterable[Piece]) -> list[str]:
    """One line per piece found: what it is and its id."""
    types = {p.name: p.type.rsplit(":", 1)[-1] for p in pieces}
    return [f"{name} ({types.get(name, '?')} {got['id']})" for name, got in sorted(found.items())]
