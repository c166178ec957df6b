"""Each node's own credential for a round of the controller's boot server, and the check of a
request signed with it.

A round (`controller.Round`: one `boot serve`, or one `up`'s wait) has a key, 32 random
bytes, new each round, that only the controller holds: the round's directory keeps it in `key`
(0600), and it goes into no node's user data, no stack output and no log line. Each node's
token is derived from it:

    token(node) = HMAC-SHA256(round key, "rackform-boot-node\\0" + node name), hex

and a node's user data carries its own token only. The node signs each request with it
(the node script's `signature`: the method, the path and the body's sha256) and sends
`Authorization: Rackform-Node <node>:<signature>`, never the token. The server derives the
named node's token from the key and compares the signatures in constant time
(`hmac.compare_digest`), so:

- whoever holds node A's user data can sign as A and as no other node;
- a report for node B is taken only signed with B's token (A's signature names A: refused);
- an altered body, path or method no longer matches its signature (on plain HTTP too);
- a token of an earlier round is derived from another key: refused.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from rackform.boot.node.report import AUTH_SCHEME, signature
from rackform.boot.reports import valid_node

KEY_BYTES = 32
_DOMAIN = b"rackform-boot-node\0"
# `Rackform-Node <node>:<64 hex digits>`; a node name has no colon (reports.py's NODE_NAME).
_CREDENTIALS = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]{0,252}):([0-9a-f]{64})")


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def node_token(key: bytes, node: str) -> str:
    """Node `node`'s token for the round of `key`."""
    if not valid_node(node):
        raise ValueError(f"{node!r} is not a node name")
    return hmac.new(key, _DOMAIN + node.encode(), hashlib.sha256).hexdigest()


def key_from_text(text: str) -> bytes:
    """The round key as its file holds it (hex), or ValueError."""
    key = bytes.fromhex(text.strip())
    if len(key) < 16:
        raise ValueError(f"a round key is {KEY_BYTES} bytes (hex); this one is {len(key)}")
    return key


@dataclass(frozen=True)
class Claim:
    """What a request's Authorization header claims: whose it is, and its signature; or why it
    is no claim (`error`: what to answer, 401)."""

    node: str = ""
    signature: str = ""
    error: str = ""


def claim(header: str) -> Claim:
    scheme, _, credentials = header.strip().partition(" ")
    if scheme != AUTH_SCHEME or not credentials:
        return Claim(error=f"a {AUTH_SCHEME} credential is required")
    found = _CREDENTIALS.fullmatch(credentials.strip())
    if found is None:
        return Claim(error=f"malformed {AUTH_SCHEME} credential")
    return Claim(found.group(1), found.group(2))


class Verifier:
    """Checks requests against the round's key for the nodes `nodes` (their tokens derived
    once)."""

    def __init__(self, key: bytes, nodes: frozenset[str]):
        if len(key) < 16:
            raise ValueError("the boot server needs the round's key (at least 16 bytes)")
        self._tokens = {n: node_token(key, n) for n in nodes}

    def signed(self, who: Claim, method: str, target: str, body: bytes) -> bool:
        """The request was signed with the token of the node it names (a node of the round)."""
        token = self._tokens.get(who.node)
        if token is None:
            return False
        want = signature(token, method, target, body)
        return hmac.compare_digest(want.encode(), who.signature.encode())
