"""A host that already exists, as a bare-metal or colocation node group lists it: its address,
rack, checkpoint drives and BMC. Its own module because the reaper (power-off through the BMC)
and the schema both read it."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from rackform.blueprint.schema.base import Strict, Violation, check
from rackform.blueprint.schema.names import Drive, IpAddress, NodeName, RackName, ResourceId


class Host(Strict):
    name: Annotated[
        NodeName,
        Field(
            description="Host name (unique in the cluster): the inventory's and Slurm's name for it."
        ),
    ]
    address: Annotated[
        IpAddress, Field(description="IP address (v4 or v6) Ansible and ssh reach the host at.")
    ]
    port: Annotated[
        int | None, Field(description="SSH port, when not the target's.", ge=1, le=65535)
    ] = None
    rack: Annotated[RackName | None, Field(description="Rack the host sits in (colocation).")] = (
        None
    )
    nvme: Annotated[
        tuple[Drive, ...],
        Field(description="Checkpoint drives by serial or /dev/disk/by-id name; empty finds them."),
    ] = ()
    bmc: Annotated[
        Bmc | None,
        Field(description="The host's BMC (Redfish), for `rackform reap`'s power-off."),
    ] = None


class Bmc(Strict):
    """A host's baseboard management controller, reached over Redfish. Credentials are named,
    never written in the blueprint: environment variables, or a file that holds `user:password`."""

    address: Annotated[
        str,
        Field(
            description="Redfish service root, e.g. https://10.50.1.11 (http:// only on a closed management network).",
            pattern=r"^https?://[A-Za-z0-9.:\[\]-]+(:\d+)?/?$",
        ),
    ]
    system: Annotated[
        ResourceId | None,
        Field(
            description="Redfish ComputerSystem id under /redfish/v1/Systems/; default: the BMC's only system."
        ),
    ] = None
    username_env: Annotated[
        str | None,
        Field(
            description="Environment variable holding the BMC user.", pattern=r"^[A-Z_][A-Z0-9_]*$"
        ),
    ] = None
    password_env: Annotated[
        str | None,
        Field(
            description="Environment variable holding the BMC password.",
            pattern=r"^[A-Z_][A-Z0-9_]*$",
        ),
    ] = None
    credentials_file: Annotated[
        str | None,
        Field(description="File holding `user:password` (a secret mounted on the controller)."),
    ] = None
    verify_tls: Annotated[bool, Field(description="Check the BMC's TLS certificate.")] = True
    timeout_s: Annotated[
        float, Field(description="Seconds to wait for the BMC on each request.", gt=0, le=300)
    ] = 10

    @model_validator(mode="after")
    def _credentials(self) -> Bmc:
        env = self.username_env is not None or self.password_env is not None
        if env and self.credentials_file is not None:
            check(
                [
                    Violation(
                        ("credentials_file",),
                        "credentials come from the environment or a file, not both",
                        "keep username_env/password_env or credentials_file",
                    )
                ]
            )
        if env and (self.username_env is None or self.password_env is None):
            missing = "password_env" if self.password_env is None else "username_env"
            check(
                [
                    Violation(
                        (missing,),
                        f"{missing} is missing: the BMC needs a user and a password",
                        f"add {missing}: NAME_OF_AN_ENVIRONMENT_VARIABLE",
                    )
                ]
            )
        if not env and self.credentials_file is None:
            check(
                [
                    Violation(
                        ("credentials_file",),
                        "the BMC has no credentials",
                        "add username_env and password_env, or credentials_file",
                    )
                ]
            )
        return self


class HostsFields(Strict):
    """What a node group of listed hosts adds to the shared NodeGroup."""

    hosts: Annotated[
        tuple[Host, ...], Field(description="Existing hosts (bare metal / colocation).")
    ] = ()


def unique_hosts(groups) -> list[Violation]:
    """Host names are unique in the cluster, and so is each address and port."""
    out: list[Violation] = []
    seen_hosts: set[str] = set()
    seen_addrs: dict[tuple[str, int | None], Host] = {}
    for i, g in enumerate(groups):
        for j, h in enumerate(g.hosts):
            at = ("node_groups", i, "hosts", j)
            if h.name in seen_hosts:
                out.append(
                    Violation(
                        (*at, "name"),
                        f"host {h.name!r} is listed twice",
                        "host names must be unique in the cluster",
                    )
                )
            seen_hosts.add(h.name)
            key = (h.address, h.port)
            if key in seen_addrs:
                out.append(
                    Violation(
                        (*at, "address"),
                        f"address {h.address} (port {h.port or 'default'}) is already host {seen_addrs[key].name!r}",
                        "every host needs its own address or port",
                    )
                )
            seen_addrs[key] = h
    return out
