"""Nodes that configure themselves: the artifact a node fetches at first boot and the user data
that fetches and runs it.

A node an autoscaling group adds long after `up` has no controller to configure it, so it runs
the same roles on itself, from an artifact pinned by its sha256: the roles, the validators, the
Ansible collections the roles use (copied from the controller's pinned `ansible` package), the
node group's configuration variables and the node script (`node_bootstrap.py`, the node
package's modules as one file), the stdlib-only script that installs ansible-core in a
virtualenv, runs the site playbook over `localhost` and then the serving checks (the
collection's `validators.serving`). The artifact is a deterministic tar.gz (sorted, zero times and owners),
so the same inputs give the same sha256 on any controller and an unchanged cluster never gets a
new launch template.

The user data is a shell script: cloud-init runs a user-data script once, as root, at first
boot ("User data formats: user-data script", cloud-init docs). It installs the stack's host key
and the controller's public key first (so the controller can verify the node from its first
connection, never trusting a key on first use), then fetches the artifact, checks its sha256
and runs it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shlex
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackform.boot.node.report import AUTH_SCHEME, REPORT_TO
from rackform.boot.node_script import script
from rackform.boot.reports import valid_node
from rackform.paths import collection

# The boot check of a baked image (shipped only where the blueprint bakes one, so an artifact
# without a bake is the same as before).
IMAGE_CHECK = Path(__file__).with_name("image_check.py")
# The collections the roles call modules from (ansible.posix.mount, community.general.*);
# rackform.gpu itself (roles, modules, site playbook, validators) is added from the package.
COLLECTIONS = ("ansible/posix", "community/general")
# User data is limited to 16 KB before base64 (EC2 user guide, "Run commands when you launch
# an EC2 instance with user data input"): the script carries keys and a URL, never the roles.
USER_DATA_LIMIT = 16 * 1024
# Where the user data unpacks the artifact, in a directory named by its sha256.
UNPACK_ROOT = "/opt/rackform/bootstrap"


def _installed_collection(name: str) -> Path:
    """Where the deploy extra's `ansible` package installed collection `name` ("ansible/posix").
    `ansible_collections` is a namespace package with several portions (rackform's own among
    them once Ansible's loader is installed), so each portion is looked in."""
    import ansible_collections

    for base in ansible_collections.__path__:
        found = Path(base) / name
        if (found / "MANIFEST.json").is_file():
            return found
    raise FileNotFoundError(
        f"the Ansible collection {name.replace('/', '.')} is not installed "
        "(pip install 'rackform[deploy]')"
    )


def _files(root: Path, prefix: str) -> list[tuple[str, Path]]:
    return [
        (f"{prefix}/{p.relative_to(root).as_posix()}", p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    ]


# The ansible-core a node installs: rackform's own pin, never the controller's installed patch
# release, so the artifact (and its sha, which names a new launch-template version and starts an
# instance refresh) depends only on the blueprint and this checkout. It lies in the range the
# pinned `ansible` package (pyproject.toml: ansible==12.3.0, whose collections the artifact
# ships) requires: ansible-core~=2.19.5 (a test checks it).
NODE_ANSIBLE_CORE = "2.19.14"
# Mitogen for Ansible, which the node's own run of the roles goes under (its `strategy`), as
# the controller's does: the `deploy` extra's pin (a test holds them equal).
NODE_MITOGEN = "0.3.54"


def node_requirements(aws: bool) -> list[str]:
    """What the node's virtualenv installs: rackform's pinned ansible-core and Mitogen, and on
    AWS boto3 for the calls a joining node makes there (tag itself, heartbeat and complete its
    lifecycle hook). A node elsewhere makes none of them, and boto3 with botocore is most of what
    it would install."""
    return [
        f"ansible-core=={NODE_ANSIBLE_CORE}",
        f"mitogen=={NODE_MITOGEN}",
        *(["boto3>=1.34,<2"] if aws else []),
    ]


def manifest(
    variables: Mapping[str, Any],
    group: str,
    ssh_user: str,
    *,
    aws: Mapping[str, Any] | None = None,
    pip_args: tuple[str, ...] = (),
    expect_gpus: int = 0,
    serving_job: list[str] | None = None,
) -> dict[str, Any]:
    """The artifact's `bootstrap.json`: what the node script needs to know (`expect_gpus`: the
    GPUs its serving checks expect; `serving_job`: the serving smoke job's arguments, which a
    serving node runs after its checks, before it takes traffic)."""
    return {
        "serving_job": list(serving_job) if serving_job else None,
        "group": group,
        "ssh_user": ssh_user,
        "vars": dict(variables),
        "expect_gpus": expect_gpus,
        "pip": {"requirements": node_requirements(aws is not None), "args": list(pip_args)},
        "aws": dict(aws) if aws else None,
    }


@dataclass(frozen=True)
class Artifact:
    path: Path
    sha256: str

    @property
    def name(self) -> str:
        return self.path.name


def build_artifact(spec: Mapping[str, Any], cache: Path) -> Artifact:
    """The artifact for `spec` (a `manifest`), built once into `cache` and reused."""
    members = [
        ("bootstrap.json", json.dumps(spec, sort_keys=True, indent=1).encode()),
        ("node_bootstrap.py", script()),
    ]
    files = [("image_check.py", IMAGE_CHECK)] if spec.get("image") else []
    files += _files(collection(), "collections/ansible_collections/rackform/gpu")
    for c in COLLECTIONS:
        files += _files(_installed_collection(c), f"collections/ansible_collections/{c}")
    key = hashlib.sha256()
    for name, data in members:
        key.update(name.encode() + b"\0" + data + b"\0")
    for name, path in files:
        key.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    path = cache / f"rackform-bootstrap-{key.hexdigest()[:20]}.tar.gz"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        tmp.write_bytes(_tar(members, files))
        tmp.replace(path)
    return Artifact(path, hashlib.sha256(path.read_bytes()).hexdigest())


def _tar(members: list[tuple[str, bytes]], files: list[tuple[str, Path]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = [(n, d, 0o644) for n, d in members]
        entries += [
            (n, p.read_bytes(), 0o755 if p.stat().st_mode & 0o111 else 0o644) for n, p in files
        ]
        for name, data, mode in sorted(entries):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


# The fetch's redirects: followed on the same origin only (the token, where there is one, is
# never sent to another host, and never from https to http). urllib's own handler would copy it
# to any host; the rule of `http_opener`, in the few lines user data can hold.
SAME_ORIGIN = [
    "class Same(urllib.request.HTTPRedirectHandler):",
    "    def redirect_request(self, req, fp, code, msg, hdrs, new):",
    "        new = urllib.parse.urljoin(req.full_url, new)",
    "        if urllib.parse.urlsplit(new)[:2] != urllib.parse.urlsplit(req.full_url)[:2]:",
    "            raise SystemExit(f'{url}: refused a redirect ({code}) to {new.split(\"?\")[0]}:'",
    "                             ' nothing is fetched from another host')",
    "        return super().redirect_request(req, fp, code, msg, hdrs, new)",
    "opener = urllib.request.build_opener(Same)",
]


def user_data(
    *,
    ssh_user: str = "",
    authorized_key: str = "",
    host_private_key: str = "",
    host_public_key: str = "",
    artifact_url: str = "",
    artifact_sha256: str = "",
    report: Mapping[str, Any] | None = None,
    report_file: Path = REPORT_TO,
    unpack_root: str = UNPACK_ROOT,
) -> str:
    """The node's user data: the keys (where given: the stack's host key, the controller's key
    for `ssh_user`), where to report (where given: `report`, {"url", "token", "node"}: the
    node's name and its own token, and for an https server the CA bundle to verify it against,
    "ca", written to `report_file`, 0600), then (where given) the artifact fetched, checked and
    run. The fetch is signed with the node's token (the node script's `signature`, which this
    inlines: nothing of rackform is on the node yet): the controller's boot server asks for a
    signature on every request."""
    q = shlex.quote
    lines = [
        "#!/bin/sh",
        "# rackform node user data: cloud-init runs it once, as root, at first boot.",
        "set -eu",
        "umask 077",
    ]
    if host_private_key:
        lines += [
            "# The stack's host key: the controller trusts this key and no other for the node.",
            "rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub",
            f"printf '%s\\n' {q(host_private_key.strip())} > /etc/ssh/ssh_host_ed25519_key",
            f"printf '%s\\n' {q(host_public_key.strip())} > /etc/ssh/ssh_host_ed25519_key.pub",
            "chmod 600 /etc/ssh/ssh_host_ed25519_key; chmod 644 /etc/ssh/ssh_host_ed25519_key.pub",
            "mkdir -p /etc/ssh/sshd_config.d",
            "echo 'HostKey /etc/ssh/ssh_host_ed25519_key' > /etc/ssh/sshd_config.d/10-rackform.conf",
        ]
    if authorized_key:
        lines += [
            "# The controller's key, for the image's login user.",
            f"home=$(getent passwd {q(ssh_user)} | cut -d: -f6)",
            'mkdir -p "$home/.ssh"',
            f"key={q(authorized_key.strip())}",
            'grep -qxF "$key" "$home/.ssh/authorized_keys" 2>/dev/null || '
            'printf \'%s\\n\' "$key" >> "$home/.ssh/authorized_keys"',
            f'chown -R {q(ssh_user)}: "$home/.ssh"; chmod 700 "$home/.ssh"',
        ]
    if host_private_key or authorized_key:
        lines += ["systemctl restart ssh 2>/dev/null || systemctl restart sshd"]
    fetch = ["        data = opener.open(url, timeout=60).read()"]
    if report is not None:
        settings = report_settings(report)
        lines += [
            "# Where the node reports its outcome, and its own token to sign its requests with.",
            f"mkdir -p {q(str(report_file.parent))}",
            f"printf '%s\\n' {q(json.dumps(settings, sort_keys=True))} > {q(str(report_file))}",
            f"chmod 600 {q(str(report_file))}",
        ]
        fetch = [
            f"        to = json.load(open({str(report_file)!r}))",
            "        path = urllib.parse.urlsplit(url).path",
            "        signed = 'GET\\n' + path + '\\n' + hashlib.sha256(b'').hexdigest()",
            "        sig = hmac.new(to['token'].encode(), signed.encode(), 'sha256').hexdigest()",
            f"        auth = {{'Authorization': '{AUTH_SCHEME} ' + to['node'] + ':' + sig}}",
            "        tls = ssl.create_default_context(cadata=to['ca']) if to.get('ca') else None",
            "        req = urllib.request.Request(url, headers=auth)",
            "        https = [urllib.request.HTTPSHandler(context=tls)] if tls else []",
            "        data = urllib.request.build_opener(Same, *https).open(req, timeout=60).read()",
        ]
    if artifact_url:
        root = f"{unpack_root}/{artifact_sha256}"
        lines += [
            "# The pinned artifact: fetched, checked against its sha256, run.",
            f"dir={root}",
            'mkdir -p "$dir"',
            "python3 - <<'FETCH'",
            "import hashlib, io, tarfile, time, urllib.parse, urllib.request"
            + (", hmac, json, ssl" if report is not None else ""),
            f"url, want = {artifact_url!r}, {artifact_sha256!r}",
            *SAME_ORIGIN,
            "for attempt in range(30):",
            "    try:",
            *fetch,
            "        break",
            "    except OSError as exc:",
            "        print(f'fetching {url}: {exc}; retrying', flush=True)",
            "        time.sleep(10)",
            "else:",
            "    raise SystemExit(f'could not fetch {url}')",
            "got = hashlib.sha256(data).hexdigest()",
            "if got != want:",
            "    raise SystemExit(f'{url}: sha256 {got}, expected {want}: refusing to run it')",
            "safe = {'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}",
            "with tarfile.open(fileobj=io.BytesIO(data)) as tar:",
            f"    tar.extractall('{root}', **safe)",
            "FETCH",
            'exec python3 "$dir/node_bootstrap.py" "$dir"',
        ]
    text = "\n".join(lines) + "\n"
    if len(text.encode()) > USER_DATA_LIMIT:
        raise ValueError(f"user data is {len(text.encode())} bytes; EC2 takes {USER_DATA_LIMIT}")
    return text


def report_settings(report: Mapping[str, Any]) -> dict[str, Any]:
    """What the report file holds ({"url", "token", "node"}, and where given "vars", the node's
    own inventory variables, and "ca", the CA bundle an https server is verified against),
    checked: a URL the node can post to, a token, the node name the token is for (a token is
    one node's: `credentials.node_token`), a PEM bundle."""
    url, token, node = report.get("url", ""), report.get("token", ""), report.get("node", "")
    own, ca = dict(report.get("vars") or {}), report.get("ca") or ""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"the report URL {url!r} is no http(s) URL")
    if not token or any(c.isspace() for c in token):
        raise ValueError("the report token is empty or has white space in it")
    if not valid_node(node):
        raise ValueError(f"{node!r} is not a node name (a token is one node's: name it)")
    if ca and "-----BEGIN CERTIFICATE-----" not in ca:
        raise ValueError("the CA bundle for the report URL is no PEM certificate")
    if ca and not url.startswith("https://"):
        raise ValueError(f"a CA bundle is given, but the report URL {url!r} is not https")
    return {
        "url": url.rstrip("/"),
        "token": token,
        "node": node,
        **({"vars": own} if own else {}),
        **({"ca": ca} if ca else {}),
    }
