"""Which keys may sign evidence for which environment: `promotion-keys.yaml` at the top of the
repository that holds the blueprints, reviewed like code (give it an owner in CODEOWNERS).
It holds public keys only:

    keys:
      - name: staging-deploy-2026          # for people; the id is the key's fingerprint
        environments: [staging]            # whose evidence this key may sign
        public_key: |
          -----BEGIN PUBLIC KEY-----
          MCowBQYDK2VwAyEA...
          -----END PUBLIC KEY-----

A signature counts only where its key id (the fingerprint, `signing.key_id`) is the
fingerprint of a key listed here for the environment the statement is about; an id that is not
listed, a key listed for another environment, or a signature that does not verify under the
listed key, is refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from rackform.evidence.signing import SigningError, key_id, payload, signature_ok

KEYS_FILE = "promotion-keys.yaml"


@dataclass(frozen=True)
class Trusted:
    name: str
    environments: frozenset[str]
    public: Ed25519PublicKey


def load(path: Path) -> dict[str, Trusted]:
    """Key id -> trusted key; SigningError (naming the file and the entry) when it is wrong."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SigningError(
            f"{path}: no such file: list the public keys that may sign evidence there"
        ) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SigningError(f"{path}: unreadable ({str(exc).splitlines()[0]})") from None
    entries = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise SigningError(
            f"{path}: expected `keys:`, a list of {{name, environments, public_key}}"
        )
    out: dict[str, Trusted] = {}
    for i, entry in enumerate(entries):
        trusted = _entry(path, i, entry)
        out[key_id(trusted.public)] = trusted
    return out


def _entry(path: Path, i: int, entry: Any) -> Trusted:
    where = f"{path}: keys[{i}]"
    if not isinstance(entry, dict):
        raise SigningError(f"{where}: expected a mapping with name, environments, public_key")
    envs = entry.get("environments")
    if not isinstance(envs, list) or not envs or not all(isinstance(e, str) for e in envs):
        raise SigningError(f"{where}.environments: a list of environment names, e.g. [staging]")
    try:
        public = serialization.load_pem_public_key(str(entry.get("public_key", "")).encode())
    except (ValueError, TypeError):
        raise SigningError(f"{where}.public_key: not a PEM public key") from None
    if not isinstance(public, Ed25519PublicKey):
        raise SigningError(f"{where}.public_key: not an Ed25519 key")
    return Trusted(str(entry.get("name") or key_id(public)), frozenset(envs), public)


def verified_payload(env: Any, keys: dict[str, Trusted], environment: str) -> bytes:
    """The payload of the envelope `env`, once a key listed for `environment` signed it."""
    body = payload(env)
    sigs = env.get("signatures") or []
    if not sigs:
        raise SigningError(
            "unsigned: the source deploy ran without RACKFORM_EVIDENCE_SIGNING_KEY; "
            "no signature, no promotion"
        )
    why = []
    for s in sigs:
        kid = s.get("keyid") if isinstance(s, dict) else None
        trusted = keys.get(kid)
        if trusted is None:
            why.append(f"key {kid} is not in {KEYS_FILE}")
        elif environment not in trusted.environments:
            allowed = ", ".join(sorted(trusted.environments))
            why.append(f"key {kid} ({trusted.name}) may sign for {allowed}, not {environment}")
        elif not signature_ok(trusted.public, env, str(s.get("sig", ""))):
            why.append(f"the signature of key {kid} ({trusted.name}) does not verify")
        else:
            return body
    raise SigningError("; ".join(why))
