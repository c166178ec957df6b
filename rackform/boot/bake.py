"""Runs on an image builder, as root, from the node image's build component (on AWS an EC2
Image Builder component): fetches the bake's artifact (the same kind a node that configures
itself fetches), runs the site playbook over `localhost` with the node script's own functions,
limited to the tags a bake runs (the plan's `baked_tags`, named in the artifact), and records
what it baked in /etc/rackform/image.json.

    python3 bake.py converge URL SHA256   fetch (once), check and unpack the artifact, run the
                                          roles; exit 0, also where the driver asks for a
                                          reboot (the component reboots next, then converges
                                          again)
    python3 bake.py record URL SHA256     after the second converge: refuse a reboot still
                                          asked for, write the record, remove the artifact

Standard library only, and Python 3.10 (Ubuntu 22.04's): nothing of rackform is installed on
the builder.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

RECORD = Path("/etc/rackform/image.json")
WORK = Path("/opt/rackform/image")
# Where the nvidia_driver role asks for a reboot under a local connection.
REBOOT_REQUEST = Path("/var/lib/rackform/image-reboot-requested")
NODE_SCRIPT = "node_bootstrap"  # the node script's module, at the artifact's top level


class SameOrigin(urllib.request.HTTPRedirectHandler):
    """Redirects followed on the artifact's own origin (scheme, host, port) only, never from
    https to http: as the node's own fetch (its user data's)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = urllib.parse.urljoin(req.full_url, newurl)
        if urllib.parse.urlsplit(new)[:2] != urllib.parse.urlsplit(req.full_url)[:2]:
            fp.close()
            old, where = req.full_url.split("?")[0], new.split("?")[0]
            raise SystemExit(
                f"{old}: refused a redirect ({code}) to {where}: nothing is fetched from"
                " another host"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch(url: str, want: str, into: Path) -> Path:
    root = into / want
    if (root / "bootstrap.json").is_file():
        return root  # unpacked by the first converge
    opener = urllib.request.build_opener(SameOrigin)
    for _ in range(30):
        try:
            data = opener.open(url, timeout=60).read()
            break
        except OSError as exc:
            print(f"fetching {url}: {exc}; retrying", flush=True)
            time.sleep(10)
    else:
        raise SystemExit(f"could not fetch {url}")
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise SystemExit(f"{url}: sha256 {got}, expected {want}: refusing to run it")
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(root, **safe)
    return root


def converge(root: Path) -> None:
    spec = json.loads((root / "bootstrap.json").read_text(encoding="utf-8"))
    sys.path.insert(0, str(root))
    node = __import__(NODE_SCRIPT)
    # Only the baked roles: Ansible's TAGS_RUN setting, which the node script's run passes on.
    os.environ["ANSIBLE_RUN_TAGS"] = ",".join(spec["image"]["tags"])
    node.configure(root, spec, REBOOT_REQUEST)


def record(root: Path, sha: str, record_path: Path = RECORD) -> dict:
    if REBOOT_REQUEST.exists():
        raise SystemExit("the roles asked for a reboot again after the build's reboot")
    spec = json.loads((root / "bootstrap.json").read_text(encoding="utf-8"))
    out = {
        **spec["image"],
        "artifact": sha,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return out


def main(argv: list[str]) -> int:
    action, url, sha = argv
    root = fetch(url, sha, WORK)
    if action == "converge":
        converge(root)
        return 0
    print(json.dumps(record(root, sha)), flush=True)
    # The artifact holds the cluster's configuration variables: not left on the image.
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
    root.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
