"""The names and paths a blueprint gives that end up on a command line (ssh's, Ansible's, a shell
script's on the nodes) or in a configuration file (fstab, /etc/exports, slurm.conf, an env file
a shell sources): each a pydantic type that refuses anything but what it names, so no value that
ssh could read as an option (`-oProxyCommand=...`) or a shell as code (`;`, `$(...)`, a
newline) ever leaves the loader. The same checks as functions, for the values rackform reads
back from the world (EC2's answers, Prometheus labels) before it puts them on a command line.

Each check is a whole-string match (`re.fullmatch`: `$` alone would let a trailing newline
through), and each type carries its pattern into the JSON Schema for editors."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, Field

# A login that exists on the hosts (target.ssh_user): a POSIX portable user name, lowercase as
# useradd takes it by default, a trailing `$` allowed (Samba's machine accounts); 32 at most.
LOGIN = r"^[a-z_][a-z0-9_-]{0,30}[a-z0-9_$-]?$"
# A user or group rackform creates (storage.shared, Slurm's accounting): Debian adduser's default.
NEW_USER = r"^[a-z_][a-z0-9_-]{0,31}$"
# One label of a DNS host name (RFC 1123 section 2.1): letters, digits and inner hyphens.
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_NAME = rf"^{_LABEL}(\.{_LABEL})*$"
# A host as the inventory and Slurm name it (node_groups[].hosts[].name, NodeName=).
NODE = r"^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$"
# A network interface (NCCL_SOCKET_IFNAME, written to an env file a shell sources): Linux allows
# 15 bytes (IFNAMSIZ less its NUL); these are the characters interface names are made of.
INTERFACE = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$"
# An InfiniBand / RoCE HCA (NCCL_IB_HCA), with its port where given: mlx5_0, mlx5_0:1.
HCA = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(:[0-9]{1,3})?$"
# An absolute path made of POSIX's portable file name characters (mounts, which the Slurm prolog
# and the roles' scripts put in their command lines).
PATH = r"^/[A-Za-z0-9._/-]*$"
# A path relative to a mount (a model's directory on the model mount): segments of portable file
# name characters, none starting with '.' or '-' (so no `..`, nothing read as an option).
RELATIVE_PATH = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9._-]{0,127}){0,15}$"
# A drive by serial, /dev/disk/by-id name or a path under /dev (checkpoint devices, a host's
# nvme): no segment starting with '.', so no `..` either.
DRIVE = r"^(/dev/([A-Za-z0-9_:+-][A-Za-z0-9._:+-]*/)*)?[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$"
# A rack (a Slurm switch name in topology.conf, a failure domain's name).
RACK = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
# A fabric switch or an NVLink domain (topology.conf's SwitchName= / BlockName=): a rack's characters.
SWITCH = RACK
# A Redfish resource id: one segment of a URL path.
RESOURCE_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# An NFS export's path or a Lustre file system's name.
EXPORT = r"^[A-Za-z0-9_/][A-Za-z0-9_./-]{0,255}$"
# Mount options, comma-separated (`nconnect=8`, `context=system_u:object_r:nfs_t:s0`): no white
# space (fstab's field separator), nothing a shell or fstab reads.
MOUNT_OPTIONS = r"^([A-Za-z0-9_][A-Za-z0-9_.:=/+@-]*(,[A-Za-z0-9_][A-Za-z0-9_.:=/+@-]*)*)?$"
# The id a target gives a machine it created (the 4th field of a stack's node, the inventory's
# `rackform_instance_id`, which a target's SSH tunnel names).
MACHINE_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
# An EC2 instance id, which the tunnel (a ProxyCommand: ssh expands its `%` tokens, then a shell
# runs it) names. EC2 gives 8 or 17 hex digits; what matters is that nothing else is in it.
INSTANCE_ID = r"^i-[0-9a-z]{1,32}$"


class UnsafeValue(ValueError):
    """A value read from the world (a stack's outputs, EC2, Prometheus, Slurm) that is not what
    it should name: refused before it reaches a command line. One line, naming value and source."""


def _matches(pattern: str, value: str) -> bool:
    return isinstance(value, str) and re.fullmatch(pattern, value) is not None


def _checked(pattern: str, what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not _matches(pattern, value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return check


def _typed(pattern: str, what: str) -> object:
    """A str type checked against `pattern` (the message says `what` it must be)."""
    return Annotated[
        str, AfterValidator(_checked(pattern, what)), Field(json_schema_extra={"pattern": pattern})
    ]


def ip_address(value: str) -> str:
    """`value` as an IPv4 or IPv6 address, normalized; ValueError where it is none."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None


def address(value: str) -> str:
    """An IP address (normalized) or a DNS host name; ValueError where it is neither."""
    try:
        return ip_address(value)
    except ValueError:
        if not (_matches(HOST_NAME, value) and len(value) <= 253):
            raise ValueError(f"{value!r} is neither an IP address nor a host name") from None
        return value


LoginName = _typed(
    LOGIN,
    "a user name: a lowercase letter or '_' first, then lowercase letters, digits, '_' or '-' "
    "(a '$' last allowed), up to 32",
)
NodeName = _typed(
    NODE, "a host name: a letter or digit first, then letters, digits, '.' or '-' (up to 63)"
)
Interface = _typed(
    INTERFACE,
    "a network interface name (e.g. eth0, ens5, bond0.100): letters, digits, '_', '.' or '-', "
    "a letter, digit or '_' first, up to 15",
)
Hca = _typed(HCA, "an HCA name, with its port where given (e.g. mlx5_0, mlx5_0:1)")
AbsolutePath = _typed(
    PATH, "an absolute path of letters, digits, '.', '_', '-' and '/' (e.g. /mnt/checkpoints)"
)
RelativePath = _typed(
    RELATIVE_PATH,
    "a path relative to the mount: segments of letters, digits, '.', '_' or '-', none starting "
    "with '.' or '-' (e.g. llama-3.1-8b or models/llama-3.1-8b)",
)
Drive = _typed(
    DRIVE,
    "a drive's serial, /dev/disk/by-id name or path under /dev (letters, digits, '.', '_', ':', "
    "'+' or '-', a letter or digit first)",
)
RackName = _typed(
    RACK, "a rack name: a letter or digit first, then letters, digits, '.', '_' or '-'"
)
SwitchName = _typed(
    SWITCH,
    "a switch or NVLink domain name: a letter or digit first, then letters, digits, '.', '_' or '-'",
)
ResourceId = _typed(RESOURCE_ID, "a Redfish id: letters, digits, '.', '_' or '-'")
Export = _typed(
    EXPORT, "an export path or file system name (letters, digits, '.', '_', '-' and '/')"
)
MountOptions = _typed(
    MOUNT_OPTIONS,
    "mount options: comma-separated words of letters, digits and . _ : = / + @ -, no spaces",
)
IpAddress = Annotated[str, AfterValidator(ip_address)]
Address = Annotated[str, AfterValidator(address)]


def node_name(value: object, source: str) -> str:
    """`value` where it names a node (NODE), else UnsafeValue saying where it came from."""
    if not _matches(NODE, value):  # type: ignore[arg-type]
        raise UnsafeValue(f"{source} names a node {value!r}, which is no host name: refused")
    return value  # type: ignore[return-value]


def machine_id(value: object, source: str) -> str:
    if not _matches(MACHINE_ID, value):  # type: ignore[arg-type]
        raise UnsafeValue(f"{source} gives machine id {value!r}, which is no id: refused")
    return value  # type: ignore[return-value]


def instance_id(value: object, source: str) -> str:
    if not _matches(INSTANCE_ID, value):  # type: ignore[arg-type]
        raise UnsafeValue(f"{source} gives instance id {value!r}, which is no EC2 id: refused")
    return value  # type: ignore[return-value]


def node_address(value: object, source: str) -> str:
    """`value` where it is an IP address, else UnsafeValue naming the source."""
    try:
        ip_address(value)  # type: ignore[arg-type]
    except ValueError:
        raise UnsafeValue(
            f"{source} gives address {value!r}, which is no IP address: refused"
        ) from None
    return value  # type: ignore[return-value]


def port(value: object, source: str) -> object:
    """A port number (an int, or the integral double a stack's outputs carry it as)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    try:
        ok = number and value == int(value) and 1 <= value <= 65535  # type: ignore[operator]
    except (OverflowError, ValueError):  # inf, nan
        ok = False
    if not ok:
        raise UnsafeValue(f"{source} gives port {value!r}, which is no port number: refused")
    return value


def switch_name(value: object, source: str) -> str:
    """`value` where it can name a Slurm switch or block in topology.conf (RACK: no white space,
    `=`, `,` or brackets, which the file's parser reads), else UnsafeValue naming the source."""
    if not _matches(RACK, value):  # type: ignore[arg-type]
        raise UnsafeValue(f"{source} gives {value!r}, which cannot name a switch: refused")
    return value  # type: ignore[return-value]
