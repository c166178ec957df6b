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


# Two serving nodes of one L40S each, bought at $8,760 over a year ($1.00 an hour each) plus
# 0.63 kW at $0.10/kWh: $1.063 per node-hour.
SERVE = """\
name: chat-serve-a
purpose: inference
owner: serving@example.com
target: {type: bare_metal, ssh_user: root, capex_usd_per_gpu: 8760, amortize_months: 12,
         power_usd_per_kwh: 0.1}
node_groups:
  - name: l40s-serve
    gpu: L40S
    gpus_per_node: 1
    hosts:
      - {name: srv-01, address: 10.0.0.1}
      - {name: srv-02, address: 10.0.0.2}
network: {fabric: ethernet}
workload:
  model_params_b: 8
  method: serve
  seq_len: 8192
  model: {layers: 32, hidden: 4096, attention_heads: 32, kv_heads: 8}
  serving: {concurrency: 8, itl_p99_ms: 60}
environments:
  staging: {}
  prod: {}
promotion:
  prod: {from: staging}
"""
HOSTS = ("srv-01", "srv-02")


def served(rate: float, status: str = "pass", cost: float | None = None) -> dict:
    """One node's report from the serving smoke job (the validators' check format)."""
    checks = [
        {"name": "gpu_count", "status": "pass", "measured": 1, "expected": 1},
        {"name": "decode_tokens_per_s", "status": status, "measured": rate, "expected": 200.0,
         "unit": "tokens/s", "op": ">=",
         **({"detail": "the model did not load"} if status == "not-run" else {})},
    ]  # fmt: skip
    if cost is not None:
        # The job's figure is informational (validators/serving_checks.py): not-run, measured.
        checks.append({"name": "cost_per_mtok", "status": "not-run", "measured": cost,
                       "expected": None, "unit": "USD per 1M output tokens"})  # fmt: skip
    return {"checks": checks}


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
