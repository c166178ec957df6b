"""End to end: a node that configures itself, as an inference cluster's joining node does (the
nodes an autoscaling group adds after `up`). A fresh testbed VM (its own, never converged) runs
the rendered user data as cloud-init runs a user-data script: once, as root, detached from any
login, with a bare environment. The script installs the stack's host key and the controller's
key, fetches the bootstrap artifact from a loopback server (S3 behind the VPC endpoint on AWS),
checks its sha256, makes its virtualenv with ansible-core, runs the roles on the node itself
and then the serving checks, as such a node does.

What this scenario is about is that mechanism, from the node image the session baked
(tests/e2e/conftest.py `node_image`, `rackform image build` as a user runs it for bare metal):
the image's record matches the node's artifact, so the node runs only what is its own (its
array, its mounts) and none of the baked roles, and says so in its log; it fetches its artifact
from the controller's boot server and posts its report there, and the report is judged passed.
Its time from user data to report is printed with the e2e's phases (the plain image's node took
1,417 s).

Then, from the controller: the node answers SSH with the stack's host key only (an empty
known_hosts is refused: no trust on first use), its status file says configured, the array is
mounted and the NCCL config written; the Configure resource's `read` (what `pulumi refresh`
calls), after an edit of /etc/nccl.conf, names that node and task and nothing else.

Not run here (no AWS): the S3 fetch itself, tagging the instance and completing the lifecycle
hook (the artifact carries no `aws` section in this test; see the README's AWS list).
"""

from __future__ import annotations

import functools
import http.server
import json
import shlex
import time
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import pytest
import yaml
from loopback import http_server
from vms import booted_testbed, bootstrap_wheelhouse

from rackform.boot.artifact import build_artifact, manifest, user_data
from rackform.boot.credentials import new_key, node_token
from rackform.boot.groups import expected_image, serving_job
from rackform.boot.reports import wait
from rackform.boot.serve import BootServer, running
from rackform.engine import prepare
from rackform.plan.inventory import configure_vars, group_name
from rackform.plan.model import thaw
from rackform.stack.stages import ConfigureProvider
from rackform.stage_work import CONFIGURE
from rackform.targets.aws.access import NodeKeysProvider, known_hosts_line
from rackform.testbed.apt import sources_line
from rackform.testbed.ssh import Ssh

pytestmark = pytest.mark.slow

GUEST = "10.0.2.2"  # the host's loopback, from a guest on QEMU's user network


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class StrictSsh(Ssh):
    """The testbed's SSH, trusting only the host keys in its known_hosts (the testbed's own
    accepts a new VM's first key)."""

    def options(self) -> list[str]:
        return [
            "StrictHostKeyChecking=yes" if o == "StrictHostKeyChecking=accept-new" else o
            for o in super().options()
        ]


def _serve(directory: Path):
    return http_server(functools.partial(_Quiet, directory=str(directory)))


@pytest.fixture(scope="module")
def fresh_vm(tmp_path_factory, phases, node_image):
    d = tmp_path_factory.mktemp("fresh-vm")
    image = node_image()
    # Two vCPUs: a node that configures itself at boot runs Ansible's controller beside each
    # task's module, on its own CPUs (the testbed's nodes have one: their controller is here).
    with booted_testbed(
        d, 1, phases("bootstrap: a fresh VM booted (the node image)"), image=image, cpus=2
    ) as bed:
        yield bed


def serving_blueprint(bed, tmp: Path) -> Path:
    """The testbed's blueprint as an inference cluster's: what a joining node is."""
    doc = yaml.safe_load(Path(bed.blueprint).read_text())
    doc["purpose"] = "inference"
    doc["image"] = {"bake": True}
    # A serving workload small enough for a VM's CPU: the joining node runs the serving smoke
    # job (a stand-in model: none is named) in the torch environment its image holds.
    doc["workload"] = {
        "model_params_b": 1,
        "method": "serve",
        "seq_len": 64,
        "serving": {"concurrency": 2, "prompt_tokens": 16, "output_tokens": 4},
    }
    path = tmp / "testbed-serving.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_fresh_node_configures_itself_from_its_user_data(fresh_vm, apt_server, phases, tmp_path):
    bed = fresh_vm
    node = bed.nodes[0]
    harness = bed.ssh(node.name)
    plan = prepare(serving_blueprint(bed, tmp_path)).plan
    group = plan.node_groups[0]
    with phases("bootstrap: wheelhouse (ansible-core; downloaded on first use)"):
        wheels = bootstrap_wheelhouse()
    keys = NodeKeysProvider().create({"cluster": plan.stack}).outs
    reports, key = tmp_path / "reports", new_key()
    with _serve(wheels) as wheel_port:
        site = f"http://{GUEST}:{wheel_port}/"
        # The site's own package mirrors (an air-gapped site's): the only sources the node has.
        variables = configure_vars(thaw(plan.group_vars))
        spec = manifest(
            variables,
            group_name(group.name),
            plan.ssh_user,
            pip_args=("--no-index", "--find-links", site, "--trusted-host", GUEST),
            serving_job=serving_job(thaw(plan.group_vars), group.name),
        )
        assert spec["serving_job"], "the serving workload gives the node its job"
        # What the node's image should hold: the image's record says it does, so the node runs
        # only what is its own (rackform/boot/image_check.py).
        spec["image"] = expected_image(variables)
        artifact = build_artifact(spec, tmp_path / "artifacts")
        # The controller's boot server: the node fetches its artifact there and reports there.
        server = BootServer(artifact.path, [node.name], reports, key)
        with running(server, "127.0.0.1") as url:
            guest_url = url.replace("127.0.0.1", GUEST)
            text = user_data(
                ssh_user=plan.ssh_user,
                authorized_key=keys["client_public_key"],
                host_private_key=keys["host_private_key"],
                host_public_key=keys["host_public_key"],
                artifact_url=f"{guest_url}/artifact/{artifact.sha256}",
                artifact_sha256=artifact.sha256,
                report={"url": guest_url, "token": node_token(key, node.name), "node": node.name},
            )
            apt = sources_line(apt_server).strip()
            harness.run(f"rm -f /etc/apt/sources.list.d/*; echo '{apt}' > /etc/apt/sources.list")
            harness.run(
                "mkdir -p /var/lib/cloud/instance && cat > /var/lib/cloud/instance/user-data.txt"
                " && chmod 700 /var/lib/cloud/instance/user-data.txt",
                input=text,
            )
            # As cloud-init's scripts-user module runs it: root, cwd /, a bare environment, in
            # a service of its own rather than a login session (the script restarts sshd).
            started = time.monotonic()
            harness.run(
                "systemd-run --unit=rackform-user-data --collect --working-directory=/ "
                "--setenv=PATH=/usr/sbin:/usr/bin:/sbin:/bin /bin/sh -c "
                "'/var/lib/cloud/instance/user-data.txt > /var/log/cloud-init-output.log 2>&1'"
            )
            with phases("bootstrap: the node configured itself from the node image and reported"):
                judged = wait([node.name], reports, artifact.sha256, deadline_s=1500, poll_s=5)
            took = time.monotonic() - started
        files = tmp_path / "access"
        files.mkdir()
        key, known = files / "id_ed25519", files / "known_hosts"
        key.touch(mode=0o600)
        key.write_text(keys["client_private_key"])
        known.write_text(known_hosts_line(keys["host_public_key"]))
        node_ssh = StrictSsh(node.ssh_port, key, known)
        status = _wait_for_status(node_ssh, timeout=120)
        log = node_ssh.run("cat /var/log/rackform-bootstrap.log", check=False).stdout
        phases.notes.append(
            f"the node image's node: user data to a passed report in {took:.0f} s (the plain"
            " image's node: 1,417 s); its bootstrap, step by step (its log's clock):"
        )
        phases.notes += [f"  {line}" for line in log_steps(log)]
        tail = "\n".join(log.splitlines()[-40:])
        assert judged.validated, f"{judged.lines()}\n{status}\n{tail}"
        assert status["configured"], f"{status}\n{tail}"
        assert status["artifact"] == artifact.sha256
        # The image held the baked roles: the node ran none of them, and said so.
        assert "does not match the blueprint" not in log, log
        assert (
            "the node image holds nvidia_driver, nccl_rdma, dcgm, slurm_packages, smoke_train"
            in log
        ), log

    # Only the stack's host key is trusted: with an empty known_hosts the node is refused.
    empty = files / "empty_known_hosts"
    empty.write_text("")
    refused = StrictSsh(node.ssh_port, key, empty).run("true", check=False)
    assert refused.returncode != 0
    assert "Host key verification failed" in refused.stderr
    # What the roles made, on the node itself.
    mounts = node_ssh.run(f"findmnt -n -o FSTYPE {plan.checkpoint.mount}").stdout.split()
    assert mounts == [plan.checkpoint.filesystem]
    assert "NCCL" in node_ssh.run("cat /etc/nccl.conf").stdout
    # Its serving checks' report, in the status as in the report the controller took.
    checks = {c["name"]: c["status"] for c in status["checks"]}
    assert checks.get("model_mount") == "pass", status["checks"]
    # Its serving smoke job, from the image's torch (nothing installed at boot): the stand-in
    # model loaded, every request generated; its rates reported (a stand-in is not judged).
    assert (checks.get("model_load"), checks.get("generation")) == ("pass", "pass"), status
    assert "-m validators.serving_smoke" in log, log

    # The Configure resource's refresh, from the controller over the stack's access.
    access = {"private_key": keys["client_private_key"], "known_hosts": known.read_text()}
    props = {
        "cluster": plan.stack,
        "inventory": thaw(plan.inventory),
        "group_vars": variables,
        "content_hash": "sha256:recorded",
        "access": access,
    }
    provider = ConfigureProvider(**CONFIGURE)
    # One refresh (every role in check mode, the longest phase here) shows both sides: with one
    # hand edit on the node it names that task on that node, and nothing else (a freshly
    # configured node has no other drift).
    node_ssh.run("echo 'NCCL_DEBUG=TRACE' >> /etc/nccl.conf")
    with phases("bootstrap: refresh (roles in check mode) names the one hand edit, nothing else"):
        drifted = provider.read(f"{plan.stack}-configure", props)
    drift = drifted.outs["drift"]
    assert list(drift) == [node.name], drift
    assert drift[node.name] and all(t.startswith("nccl_rdma : ") for t in drift[node.name]), drift
    assert drifted.outs["content_hash"] == f"drifted:{node.name}"


def _wait_for_status(node_ssh: Ssh, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    status = "/var/lib/rackform/bootstrap.json"
    while time.monotonic() < deadline:
        got = node_ssh.run(f"cat {shlex.quote(status)} 2>/dev/null", check=False)
        if got.returncode == 0 and got.stdout.strip():
            return json.loads(got.stdout)
        time.sleep(10)
    out = node_ssh.run("tail -n 60 /var/log/cloud-init-output.log", check=False).stdout
    raise AssertionError(f"no bootstrap status after {timeout} s; the script's output:\n{out}")


def log_steps(log: str) -> list[str]:
    """Each command the node's bootstrap ran (its log's `$ ...` lines) with the seconds until
    the log's next line: where the node's own time went."""
    stamped = []
    for line in log.splitlines():
        stamp, _, rest = line.partition(" rackform-bootstrap: ")
        if rest:
            stamped.append((datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"), rest))
    return [
        f"{(nxt[0] - at).total_seconds():6.0f} s  {text[:110]}"
        for (at, text), nxt in pairwise(stamped)
        if text.startswith("$ ")
    ]
