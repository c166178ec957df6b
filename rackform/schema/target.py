"""Where a cluster runs: AWS, bare metal or colocation, as a union discriminated on `type`."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from rackform.schema.base import Strict, Violation, check

_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a valid CIDR ({exc}); write e.g. 10.20.0.0/16") from exc


Cidr = Annotated[str, AfterValidator(_cidr)]


class AmiSpec(Strict):
    id: Annotated[
        str | None,
        Field(
            description="An explicit AMI id (ami-...). Wins over the filter.",
            pattern=r"^ami-[0-9a-f]{8,17}$",
        ),
    ] = None
    name_filter: Annotated[
        str,
        Field(description="AMI name filter used when no id is given (AWS Deep Learning AMIs)."),
    ] = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *"
    owner: Annotated[str, Field(description="AMI owner account for the filter.")] = "amazon"


class AwsTarget(Strict):
    type: Annotated[Literal["aws"], Field(description="Amazon EC2.")]
    region: Annotated[str, Field(description="AWS region, e.g. us-east-1.")]
    availability_zone: Annotated[
        str, Field(description="Zone inside the region; placement groups need one zone.")
    ]
    ssh_cidrs: Annotated[
        tuple[Cidr, ...],
        Field(
            description="CIDRs allowed to reach SSH (port 22). Never 0.0.0.0/0 unless allow_public_ssh.",
            min_length=1,
        ),
    ]
    allow_public_ssh: Annotated[
        bool, Field(description="Explicitly allow 0.0.0.0/0 or ::/0 in ssh_cidrs.")
    ] = False
    vpc_cidr: Annotated[Cidr, Field(description="CIDR of the cluster's VPC.")] = "10.0.0.0/16"
    market: Annotated[
        Literal["on-demand", "spot", "capacity-block", "reservation"],
        Field(description="How capacity is bought."),
    ] = "on-demand"
    reservation_id: Annotated[
        str | None,
        Field(
            description="Capacity reservation / capacity block id (cr-...), for those markets.",
            pattern=r"^cr-[0-9a-f]{8,17}$",
        ),
    ] = None
    ami: Annotated[AmiSpec, Field(description="Machine image.")] = AmiSpec()
    key_name: Annotated[str | None, Field(description="EC2 key pair for SSH.")] = None

    @field_validator("region")
    @classmethod
    def _region(cls, v: str) -> str:
        if not _REGION.match(v):
            raise ValueError(f"{v!r} is not an AWS region name; write e.g. us-east-1")
        return v

    @model_validator(mode="after")
    def _rules(self) -> AwsTarget:
        out = []
        if not self.availability_zone.startswith(self.region):
            out.append(
                Violation(
                    ("availability_zone",),
                    f"zone {self.availability_zone!r} is not in region {self.region!r}",
                    f"use a zone such as {self.region}a",
                )
            )
        for i, c in enumerate(self.ssh_cidrs):
            if ipaddress.ip_network(c).prefixlen == 0 and not self.allow_public_ssh:
                out.append(
                    Violation(
                        ("ssh_cidrs", i),
                        f"{c} opens SSH to the whole internet",
                        "narrow the CIDR, or set allow_public_ssh: true",
                    )
                )
        needs_res = self.market in ("capacity-block", "reservation")
        if needs_res and not self.reservation_id:
            out.append(
                Violation(
                    ("reservation_id",),
                    f"market {self.market!r} needs a reservation_id",
                    "add reservation_id: cr-...",
                )
            )
        if not needs_res and self.reservation_id:
            out.append(
                Violation(
                    ("reservation_id",),
                    f"reservation_id is only used with capacity-block or reservation, not {self.market!r}",
                    "remove reservation_id or change market",
                )
            )
        check(out)
        return self


class Rack(Strict):
    name: Annotated[str, Field(description="Rack name as the site knows it.", min_length=1)]
    power_kw: Annotated[float, Field(description="Power budget of the rack in kW.", gt=0, le=200)]


class _OnPremTarget(Strict):
    ssh_user: Annotated[str, Field(description="User Ansible and the host checks log in as.")] = (
        "root"
    )
    ssh_port: Annotated[int, Field(description="SSH port of every host.", ge=1, le=65535)] = 22
    private_cidr: Annotated[
        Cidr | None, Field(description="Network the nodes use to reach each other (NCCL traffic).")
    ] = None


class BareMetalTarget(_OnPremTarget):
    type: Annotated[Literal["bare_metal"], Field(description="Hosts that already exist.")]
    capex_usd_per_gpu: Annotated[
        float | None, Field(description="Hardware cost per GPU, for amortized cost reports.", gt=0)
    ] = None
    amortize_months: Annotated[
        int, Field(description="Months to amortize hardware over.", ge=1)
    ] = 36
    power_usd_per_kwh: Annotated[float | None, Field(description="Electricity price.", gt=0)] = None


class ColocationTarget(_OnPremTarget):
    type: Annotated[Literal["colocation"], Field(description="Hosts in a colocation site.")]
    site: Annotated[str, Field(description="Colocation site / cage identifier.", min_length=1)]
    racks: Annotated[
        tuple[Rack, ...], Field(description="Racks with their power budgets.", min_length=1)
    ]
    usd_per_kw_month: Annotated[
        float | None,
        Field(description="Colocation price per kW of committed power per month.", gt=0),
    ] = None
    capex_usd_per_gpu: Annotated[
        float | None, Field(description="Hardware cost per GPU, for amortized cost reports.", gt=0)
    ] = None
    amortize_months: Annotated[
        int, Field(description="Months to amortize hardware over.", ge=1)
    ] = 36

    @model_validator(mode="after")
    def _unique_racks(self) -> ColocationTarget:
        seen: set[str] = set()
        out = []
        for i, r in enumerate(self.racks):
            if r.name in seen:
                out.append(
                    Violation(
                        ("racks", i, "name"),
                        f"rack {r.name!r} is listed twice",
                        "give every rack a unique name",
                    )
                )
            seen.add(r.name)
        check(out)
        return self


Target = Annotated[
    AwsTarget | BareMetalTarget | ColocationTarget,
    Field(discriminator="type", description="Where the cluster runs (discriminated on `type`)."),
]
