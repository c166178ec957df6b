"""Runs on a node at first boot, as root, from the unpacked bootstrap artifact (see
rackform/hosts/bootstrap.py): installs ansible-core in a virtualenv, runs the site playbook over
`localhost` with the node group's configuration variables, and reports the outcome.

Standard library only, and Python 3.10 (Ubuntu 22.04's): nothing of rackform is installed on
the node. On AWS it then tags the instance `rackform:configured=<artifact sha256>` (the
cluster's inventory lists only configured nodes) and completes the autoscaling group's launch
lifecycle hook, CONTINUE or ABANDON, so a node reports healthy only once configured.

    python3 node_bootstrap.py ARTIFACT_DIR
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

VENV = Path("/opt/rackform/venv")
STATUS = Path("/var/lib/rackform/bootstrap.json")
LOG = Path("/var/log/rackform-bootstrap.log")
IMDS = "http://169.254.169.254/latest"
# The site playbook of the rackform.gpu collection, by its name in the collection (Ansible finds
# it through ANSIBLE_COLLECTIONS_PATH, the artifact's collections/).
SITE = "rackform.gpu.site"


def log(line: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = f"{stamp} rackform-bootstrap: {line}"
    print(text, flush=True)
    with LOG.open("a", encoding="utf-8") as f:
        f.write(text + "\n")


def run(argv: list[str], **kw) -> None:
    log("$ " + " ".join(argv))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", **kw.pop("env", {})}
    with LOG.open("a", encoding="utf-8") as out:
        subprocess.run(argv, check=True, stdout=out, stderr=subprocess.STDOUT, env=env, **kw)


def venv() -> Path:
    """A virtualenv with ansible-core; python3-venv from apt first where the image lacks it."""
    python = VENV / "bin" / "python"
    if not python.exists():
        probe = subprocess.run(
            [sys.executable, "-m", "ensurepip", "--version"], capture_output=True
        )
        if probe.returncode != 0:
            run(["apt-get", "update", "-q"])
            run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "python3-venv"])
        run([sys.executable, "-m", "venv", str(VENV)])
    return python


def inventory(spec: dict) -> dict:
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return {
        "all": {
            "vars": spec["vars"],
            "children": {
                "gpu_nodes": {"children": {spec["group"]: {"hosts": {"localhost": host}}}}
            },
        }
    }


def configure(root: Path, spec: dict) -> None:
    python = venv()
    pip = [str(python), "-m", "pip", "install", "-q", *spec["pip"]["args"]]
    run([*pip, *spec["pip"]["requirements"]])
    inv = root / "inventory.json"
    inv.write_text(json.dumps(inventory(spec)), encoding="utf-8")
    env = {
        "ANSIBLE_COLLECTIONS_PATH": str(root / "collections"),
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_LOCAL_TEMP": str(root / ".ansible-tmp"),
    }
    playbook = [str(VENV / "bin" / "ansible-playbook"), "-i", str(inv), SITE]
    run(playbook, env=env, cwd=str(root))


def imds(path: str) -> str:
    """IMDSv2 (the launch template requires tokens)."""
    token_req = urllib.request.Request(
        f"{IMDS}/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"},
    )
    token = urllib.request.urlopen(token_req, timeout=5).read().decode()
    req = urllib.request.Request(
        f"{IMDS}/meta-data/{path}", headers={"X-aws-ec2-metadata-token": token}
    )
    return urllib.request.urlopen(req, timeout=5).read().decode()


def report_to_aws(aws: dict, sha: str, ok: bool) -> None:
    """Tag the instance as configured (only when it is) and complete the launch hook, through
    boto3 in the virtualenv with the instance profile's credentials."""
    program = (
        "import boto3, sys\n"
        "region, iid, asg, hook, sha, ok = sys.argv[1:7]\n"
        "if ok == '1':\n"
        "    boto3.client('ec2', region_name=region).create_tags(Resources=[iid],"
        " Tags=[{'Key': 'rackform:configured', 'Value': sha}])\n"
        "if hook:\n"
        "    boto3.client('autoscaling', region_name=region).complete_lifecycle_action("
        "LifecycleHookName=hook, AutoScalingGroupName=asg, InstanceId=iid,"
        " LifecycleActionResult='CONTINUE' if ok == '1' else 'ABANDON')\n"
    )
    iid = imds("instance-id")
    argv = [aws["region"], iid, aws.get("asg", ""), aws.get("hook", ""), sha, "1" if ok else "0"]
    run([str(VENV / "bin" / "python"), "-c", program, *argv])


def main(root: Path) -> int:
    LOG.parent.mkdir(parents=True, exist_ok=True)
    STATUS.parent.mkdir(parents=True, exist_ok=True)
    spec = json.loads((root / "bootstrap.json").read_text(encoding="utf-8"))
    sha = root.name
    start = time.monotonic()
    ok, error = True, ""
    try:
        configure(root, spec)
    except (OSError, subprocess.CalledProcessError) as exc:
        ok, error = False, str(exc)
        log(f"configuration failed: {exc} (the log above says where)")
    status = {
        "artifact": sha,
        "configured": ok,
        "error": error,
        "seconds": round(time.monotonic() - start, 1),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    STATUS.write_text(json.dumps(status, indent=1) + "\n", encoding="utf-8")
    log(f"{'configured' if ok else 'NOT configured'} in {status['seconds']} s")
    if spec.get("aws"):
        report_to_aws(spec["aws"], sha, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).resolve()))
