"""How a push's SSH reaches the nodes: the stack's key and known_hosts as files, and the
inventory's tunnel (an EC2 Instance Connect Endpoint) as ssh's ProxyCommand, one connection per
task."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# An EC2 Instance Connect Endpoint "can support up to 20 concurrent connections", and cuts an
# established TCP connection after 1 hour (EC2 user guide, "Connect using EC2 Instance Connect
# Endpoint to a Linux instance", limitations). Each ssh through it opens one tunnel (its
# ProxyCommand), so runs through one open at most 20 connections at once (the forks:
# `forks`, the catalog's `configure.tunnel_connections`)...
# ...and no connection outlives its task: Ansible's default ssh_args (`-o ControlMaster=auto
# -o ControlPersist=60s`) keep each host's master connection, and with it its tunnel, open for
# 60 s after its last task, so a cluster of more than 20 nodes holds more than 20 tunnels while
# the forks move on to the next hosts, and one master carries a host's whole converge, which the
# endpoint cuts at the hour. Without connection sharing (ssh_config(5): `ControlPath none`) each
# task's ssh is its own tunnel, closed when the task's command returns: at most one per fork,
# and only a single task longer than the hour is cut (the long package installs are async and
# polled, each poll a new connection). ServerAlive notices a cut connection within two minutes
# instead of waiting on TCP.
TUNNEL_SSH_ARGS = (
    "-C -o ControlMaster=no -o ControlPath=none -o ServerAliveInterval=30 -o ServerAliveCountMax=4"
)


def with_access(
    inv: dict[str, Any],
    variables: Mapping[str, Any],
    *,
    private_key: Path | None = None,
    known_hosts: Path | None = None,
) -> dict[str, Any]:
    """A copy of the compiled inventory with the role variables as the `all` group's variables
    (host variables, such as a host's own NVMe drives, still win), the SSH key and known_hosts
    file when given (then only the hosts' keys in it are trusted: StrictHostKeyChecking=yes),
    and the inventory's SSH tunnel (`rackform_ssh_proxy`) as ssh's ProxyCommand, with one
    connection per task (TUNNEL_SSH_ARGS)."""
    inv = copy.deepcopy(inv)
    all_vars = inv.setdefault("all", {}).setdefault("vars", {})
    all_vars.update(variables)
    if private_key is not None:
        all_vars["ansible_ssh_private_key_file"] = str(private_key)
    args = []
    if known_hosts is not None:
        args += [f"-o UserKnownHostsFile={known_hosts}", "-o StrictHostKeyChecking=yes"]
    if all_vars.get("rackform_ssh_proxy"):
        args.append("-o ProxyCommand='{{ rackform_ssh_proxy }}'")
        all_vars["ansible_ssh_args"] = TUNNEL_SSH_ARGS
    if args:
        all_vars["ansible_ssh_common_args"] = " ".join(args)
    return inv


@contextmanager
def access_files(access: Mapping[str, str] | None) -> Iterator[dict[str, Path]]:
    """The stack's access ({"private_key", "known_hosts"}) as files for ssh, readable by this
    user only and removed afterwards; nothing when there is none."""
    if not access:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="rackform-access-") as d:
        key, hosts = Path(d) / "id_ed25519", Path(d) / "known_hosts"
        key.touch(mode=0o600)
        key.write_text(access["private_key"], encoding="utf-8")
        hosts.write_text(access["known_hosts"], encoding="utf-8")
        yield {"private_key": key, "known_hosts": hosts}
