"""The key material a stack's nodes are reached with, made by the stack and kept in its state.

One ed25519 key pair for the controller's SSH login and one host key pair every node of the cluster
presents. Both go to the nodes through their user data, and the controller writes a known_hosts file
holding only the cluster's host key, so a node is verified from the first connection through a
channel that proves it: whoever can launch from the launch template could read the host key too,
which is the same trust as the instances' own IAM role (say so in the README). The private keys are
Pulumi secrets: encrypted in the state, never printed.

A dynamic provider: created once, never changed by any later `up` (no input but the cluster's
name), so the launch template that carries the keys stays the same version.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider

KEY_OUTPUTS = ("client_private_key", "client_public_key", "host_private_key", "host_public_key")
SECRET_OUTPUTS = ["client_private_key", "host_private_key"]


def new_key_pair(comment: str) -> tuple[str, str]:
    """(private key in OpenSSH format, public key line)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, f"{public.decode()} {comment}"


class NodeKeysProvider(ResourceProvider):
    serialize_as_secret_always = False

    def create(self, props: dict[str, Any]) -> CreateResult:
        cluster = props["cluster"]
        client_private, client_public = new_key_pair(f"rackform-controller@{cluster}")
        host_private, host_public = new_key_pair(f"rackform-host@{cluster}")
        return CreateResult(
            f"{cluster}-keys",
            {
                "cluster": cluster,
                "client_private_key": client_private,
                "client_public_key": client_public,
                "host_private_key": host_private,
                "host_public_key": host_public,
            },
        )

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # New keys only for another cluster: rotating them would replace every node's user data.
        replaces = ["cluster"] if olds.get("cluster") != news.get("cluster") else []
        return DiffResult(changes=bool(replaces), replaces=replaces, stables=[])


class NodeKeys(pulumi.dynamic.Resource, module="rackform", name="NodeKeys"):
    client_private_key: pulumi.Output[str]
    client_public_key: pulumi.Output[str]
    host_private_key: pulumi.Output[str]
    host_public_key: pulumi.Output[str]

    def __init__(self, name: str, cluster: str, opts: pulumi.ResourceOptions | None = None):
        args = {"cluster": cluster, **dict.fromkeys(KEY_OUTPUTS)}
        secret = pulumi.ResourceOptions(additional_secret_outputs=SECRET_OUTPUTS)
        super().__init__(NodeKeysProvider(), name, args, pulumi.ResourceOptions.merge(opts, secret))


def known_hosts_line(host_public_key: str) -> str:
    """known_hosts for a file that holds this cluster's nodes only: any of them must present
    the cluster's host key (the pattern `*` is safe because the file is used for no other
    host)."""
    algorithm, body = host_public_key.split()[:2]
    return f"* {algorithm} {body}\n"


def access(keys: NodeKeys) -> pulumi.Output:
    """What the Configure and Validate stages need to reach the nodes (their `access` input)."""
    return pulumi.Output.all(keys.client_private_key, keys.host_public_key).apply(
        lambda pair: (
            {"private_key": pair[0], "known_hosts": known_hosts_line(pair[1])}
            if pair[0] and pair[1]
            else None
        )
    )
