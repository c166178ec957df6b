"""Signing validation evidence: an in-toto statement wrapped in a DSSE envelope and signed with
Ed25519 (the envelope format in-toto attestations use), by the one process that holds the
private key, the source environment's deploy (its Validate stage).

The private key reaches that process only: RACKFORM_EVIDENCE_SIGNING_KEY holds either the PEM
text or the path of a PEM file (PKCS#8, unencrypted, e.g. `openssl genpkey -algorithm ed25519`).
It is never printed, never written to state and never pickled with a provider: it is read when
the report is signed. Verifying needs only public keys (`trust`).

A key's id is its fingerprint, `ed25519:` and the first 32 hex digits of the SHA-256 of its raw
public key, so the signer needs no configuration beyond the key and a key id cannot be chosen.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

SIGNING_ENV = "RACKFORM_EVIDENCE_SIGNING_KEY"
# The symmetric key of the old seal: anyone who could verify with it could also sign.
LEGACY_ENV = "RACKFORM_EVIDENCE_KEY"
PAYLOAD_TYPE = "application/vnd.in-toto+json"


class SigningError(Exception):
    """The signing key cannot be used, or a signature does not verify; one line, why."""


def legacy_key_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """A one-line refusal when the retired symmetric key is still set, else None."""
    env = os.environ if environ is None else environ
    if not env.get(LEGACY_ENV):
        return None
    return (
        f"{LEGACY_ENV} is no longer accepted (a shared secret that signs and verifies alike): "
        f"unset it; the source deploy signs with an Ed25519 key in {SIGNING_ENV} and "
        "promotion-keys.yaml holds the public keys"
    )


def canon(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is signed, so the type cannot be swapped."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:32]


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def load_signing_key(environ: Mapping[str, str] | None = None) -> Ed25519PrivateKey | None:
    """The private key named by RACKFORM_EVIDENCE_SIGNING_KEY, None where it is not set."""
    env = os.environ if environ is None else environ
    value = (env.get(SIGNING_ENV) or "").strip()
    if not value:
        return None
    if "-----BEGIN" in value:
        data, where = value.encode(), f"{SIGNING_ENV} (PEM text)"
    else:
        where = f"{SIGNING_ENV} ({value})"
        try:
            data = Path(value).expanduser().read_bytes()
        except OSError as exc:
            raise SigningError(f"{where}: cannot be read ({exc.strerror})") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningError(f"{where}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(
            f"{where}: not an Ed25519 key (make one: openssl genpkey -algorithm ed25519)"
        )
    return key


def envelope(statement: dict[str, Any], key: Ed25519PrivateKey | None) -> dict[str, Any]:
    """`statement` as a DSSE envelope, signed with `key` (no signature without one)."""
    body = canon(statement)
    signatures = []
    if key is not None:
        sig = key.sign(pae(PAYLOAD_TYPE, body))
        signatures.append(
            {"keyid": key_id(key.public_key()), "sig": base64.b64encode(sig).decode()}
        )
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(body).decode(),
        "signatures": signatures,
    }


def payload(env: dict[str, Any]) -> bytes:
    """The signed bytes of an envelope (not yet trusted)."""
    if not isinstance(env, dict) or env.get("payloadType") != PAYLOAD_TYPE:
        raise SigningError(f"not a DSSE envelope of an in-toto statement ({PAYLOAD_TYPE})")
    try:
        return base64.b64decode(env.get("payload", ""), validate=True)
    except (ValueError, TypeError):
        raise SigningError("its payload is not base64") from None


def signature_ok(public: Ed25519PublicKey, env: dict[str, Any], sig: str) -> bool:
    try:
        public.verify(base64.b64decode(sig, validate=True), pae(PAYLOAD_TYPE, payload(env)))
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True
