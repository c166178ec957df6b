"""What the evidence and promotion tests share: the pipeline blueprint (staging, promoted to
prod), a node's passing report, and the source deploy's Ed25519 keys with the
`promotion-keys.yaml` that lists them."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rackform.evidence.signing import key_id, public_pem

PIPE = """\
name: pipe
purpose: training
owner: ml@example.com
target: {type: bare_metal, ssh_user: root}
node_groups:
  - name: cpu
    hosts:
      - {name: n1, address: 10.0.0.1}
      - {name: n2, address: 10.0.0.2}
network: {fabric: ethernet}
validation: {smoke_steps: 10}
environments:
  staging:
    node_groups: [{name: cpu, hosts: [{name: n2, remove: true}]}]
  prod: {}
promotion:
  prod: {from: staging}
"""


NODE = {"checks": [{"name": "loss_drop", "status": "pass", "measured": 0.4, "expected": 0.2}]}


def keypair(where: Path, name: str = "deploy") -> tuple[Path, Ed25519PrivateKey]:
    """A private key in a PEM file (mode 600, as a CI secret file would be)."""
    key = Ed25519PrivateKey.generate()
    path = where / f"{name}.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return path, key


def keys_file(entries: list[tuple[str, Ed25519PrivateKey, list[str]]]) -> str:
    lines = ["keys:"]
    for name, key, envs in entries:
        pem = public_pem(key.public_key()).strip().replace("\n", "\n      ")
        lines += [
            f"  - name: {name}  # {key_id(key.public_key())}",
            f"    environments: [{', '.join(envs)}]",
            "    public_key: |",
            f"      {pem}",
        ]
    return "\n".join(lines) + "\n"
