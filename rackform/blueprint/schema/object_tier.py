"""`storage.object`: checkpoints copied to object storage (S3, or a store that speaks its API)
in the background as jobs write them to the nodes' arrays, so a checkpoint outlives the node and
the cluster. The smoke job proves the copy at every validation (`checkpoint_tier`); the Slurm
prolog gives every job its place there (`$RACKFORM_CHECKPOINT_TIER`, with the number of
checkpoints kept, `workload.checkpoints_retained`, as `$RACKFORM_CHECKPOINT_KEEP`), which the
resumable job reads. Without it, a shared tier that holds checkpoints (`storage.shared.holds`)
takes the copies instead.

S3's bucket naming rules (Amazon S3 user guide, "General purpose bucket naming rules"): 3 to 63
characters, lowercase letters, digits, dots and hyphens, beginning and ending with a letter or
digit (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from rackform.blueprint.schema.base import Strict

# A bucket name S3 accepts (also the datasets' bucket of FSx, in the shared tier's schema).
S3_BUCKET = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
_URL = re.compile(rf"^s3://({S3_BUCKET})(/[A-Za-z0-9._/-]*)?$")


class ObjectStorage(Strict):
    url: Annotated[
        str,
        Field(
            description="Where checkpoints are copied: s3://BUCKET/PREFIX. Each Slurm job copies under PREFIX/<job id>, each validation under PREFIX/smoke/<node>.",
        ),
    ]
    endpoint_url: Annotated[
        str | None,
        Field(
            description="An S3-compatible store that is not AWS's (MinIO, Ceph's RGW): its https:// or http:// endpoint. Credentials are boto3's own on each node (the instance role on AWS, which the stack grants on this prefix).",
            pattern=r"^https?://[A-Za-z0-9.-]+(:\d{1,5})?/?$",
        ),
    ] = None

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not _URL.fullmatch(v):
            raise ValueError(
                f"{v!r} is not s3://BUCKET/PREFIX with a bucket name S3 accepts (3-63 lowercase"
                " letters, digits, dots and hyphens) and a prefix of letters, digits, . _ / -"
            )
        return v.rstrip("/")

    @property
    def bucket(self) -> str:
        return _URL.match(self.url).group(1)  # type: ignore[union-attr]

    @property
    def prefix(self) -> str:
        return (_URL.match(self.url).group(2) or "").strip("/")  # type: ignore[union-attr]
