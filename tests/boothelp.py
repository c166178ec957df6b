"""Helpers for the boot server's tests: requests signed as a node signs them (the real node
script's `authorization`), raw requests on a socket, and a self-signed certificate for TLS."""

from __future__ import annotations

import datetime
import ipaddress
import json
import shlex
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from rackform.boot.credentials import node_token
from rackform.boot.node import report as node_report

KEY = bytes(range(32))  # a round's key, fixed so that a failure reads the same each run


def call(url, path, *, node=None, token=None, data=None, method=None, headers=None, ca=None):
    """(status, body, headers) of one request, signed as `node` with `token` (default: the
    node's own token of KEY's round; node None: not signed)."""
    h = dict(headers or {})
    method = method or ("POST" if data is not None else "GET")
    if node is not None:
        token = token if token is not None else node_token(KEY, node)
        target = urllib.parse.urlsplit(url + path).path
        h["Authorization"] = node_report.authorization(node, token, method, target, data or b"")
    req = urllib.request.Request(url + path, data=data, headers=h, method=method)
    context = ssl.create_default_context(cadata=ca) if ca else None
    try:
        with urllib.request.urlopen(req, timeout=30, context=context) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def raw(url: str, request: bytes, timeout: float = 30) -> bytes:
    """What the server answers `request` sent as is on one connection (until it closes)."""
    host, port = url.split("://")[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def signed_post(node: str, path: str, body: bytes, *, token: str | None = None, **head) -> bytes:
    """A raw POST of `body` to `path`, signed as `node`, with the headers `head` (name: value;
    Content-Length is the body's unless given)."""
    token = token if token is not None else node_token(KEY, node)
    lines = [f"POST {path} HTTP/1.1", "Host: x"]
    lines.append(f"Authorization: {node_report.authorization(node, token, 'POST', path, body)}")
    head = {"Content-Length": str(len(body)), **{k.replace("_", "-"): v for k, v in head.items()}}
    lines += [f"{k}: {v}" for k, v in head.items() if v is not None]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def settings_in(user_data: str) -> dict:
    """The report settings a node's user data writes (its `printf ... > report.json` line)."""
    (line,) = [ln for ln in user_data.splitlines() if ln.startswith("printf") and "report" in ln]
    return json.loads(shlex.split(line)[2])


def self_signed(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """(certificate, key) files of a new self-signed certificate for `host` (an IP address)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rackform boot test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path
