"""The joining node of the bootstrap e2e (tests/e2e/test_bootstrap_vm.py), run in a thread of its
own: a fresh VM of its own boots from the baked image, runs the rendered user data as cloud-init
runs a user-data script, configures itself, and the controller's refresh reads it. Nothing of it
touches the testbed's two VMs, so in a whole e2e session it starts when the testbed is up
(conftest.py's `testbed`) and runs beside the configure e2e's first converge, which keeps one
core busy with node1 while the other has room; its test runs last and only reads what the
thread found. While the node configures itself its VM runs behind the testbed's
(`vms.vm_priority`): their scenarios come first.

Run alone (`pytest tests/e2e/test_bootstrap_vm.py`), the test starts it and waits."""

from __future__ import annotations

import functools
import http.server
import json
import shlex
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml
from loopback import http_server
from vms import booted_testbed, vm_priority

from rackform.engine import prepare
from rackform.hosts.bootstrap import build_artifact, manifest, node_requirements, user_data
from rackform.paths import cache_dir
from rackform.plan.inventory import configure_vars, group_name
from rackform.plan.model import thaw
from rackform.stack.stages import ConfigureProvider
from rackform.targets.aws.access import NodeKeysProvider, known_hosts_line
from rackform.testbed.apt import ensure_repo, sources_line
from rackform.testbed.ssh import Ssh

GUEST = "10.0.2.2"  # the host's loopback, from a guest on QEMU's user network
# The node's own bootstrap, from its user data's start to its status file: about 500 s on an
# idle machine; behind the testbed's VMs it gets only the CPU they leave, for as long as the
# configure e2e and the next files keep them busy.
CONFIGURE_TIMEOUT_S = 2400


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class PatientSsh(Ssh):
    """The testbed's SSH with a minute to connect rather than 5 s: this VM runs behind the
    testbed's while it configures itself, and its sshd can take longer than that to answer."""

    def options(self) -> list[str]:
        return [
            "ConnectTimeout=60" if o.startswith("ConnectTimeout=") else o for o in super().options()
        ]


class StrictSsh(PatientSsh):
    """Trusting only the host keys in its known_hosts (the testbed's own SSH accepts a new VM's
    first key)."""

    def options(self) -> list[str]:
        return [
            "StrictHostKeyChecking=yes" if o == "StrictHostKeyChecking=accept-new" else o
            for o in super().options()
        ]


def _serve(directory: Path):
    return http_server(functools.partial(_Quiet, directory=str(directory)))


def bootstrap_wheelhouse() -> Path:
    """ansible-core with its dependencies for the guest's Python (3.11), downloaded
    once from the package index into rackform's cache: one --find-links serves the node's whole
    bootstrap."""
    cache = cache_dir() / "wheelhouse-bootstrap-cp311"
    want = node_requirements(aws=False)
    stamp = cache / "done"
    if not stamp.exists() or stamp.read_text() != "\n".join(want):
        cache.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:",
             "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
             "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
             "-d", cache, *want],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        stamp.write_text("\n".join(want))
    return cache


def serving_blueprint(blueprint: Path, tmp: Path) -> Path:
    """The testbed's blueprint as an inference cluster's: what a joining node is."""
    doc = yaml.safe_load(blueprint.read_text())
    doc["purpose"] = "inference"
    path = tmp / "testbed-serving.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@dataclass
class Joined:
    """What the thread found, for the test to judge."""

    plan: Any = None
    node: Any = None
    artifact_sha256: str = ""
    status: dict = field(default_factory=dict)
    log: str = ""
    files: Path | None = None  # the stack's client key and known_hosts, for the test's own SSH
    node_ssh: StrictSsh | None = None
    drift: dict = field(default_factory=dict)
    content_hash: str = ""
    times: list[tuple[str, float]] = field(default_factory=list)


class Joiner:
    """The joining node's whole run in a thread: `start()`, then `result()` waits for it and
    re-raises what failed there. `close()` stops it (the VM down, the servers stopped)."""

    def __init__(self, d: Path):
        self.d = d
        self.found = Joined()
        self._stack = ExitStack()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._step = "its start"
        self._thread = threading.Thread(target=self._run, name="joiner", daemon=True)

    def start(self) -> Joiner:
        self._thread.start()
        return self

    def result(self) -> Joined:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.found

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        self._stack.close()

    def _timed(self, name: str, since: float) -> None:
        self.found.times.append((name, time.monotonic() - since))

    def _run(self) -> None:
        start = time.monotonic()
        try:
            self._bootstrap()
        except BaseException as exc:  # handed to the test by result()
            took = time.monotonic() - start
            self._error = AssertionError(
                f"the joining node's thread failed {took:.0f} s after it started, at "
                f"{self._step}: {exc!r}"
            )
            self._error.__cause__ = exc

    def _at(self, step: str) -> None:
        self._step = step

    def _bootstrap(self) -> None:
        found, stack, tmp = self.found, self._stack, self.d
        t0 = time.monotonic()
        self._at("booting its VM")
        bed = stack.enter_context(booted_testbed(tmp / "vm", 1, nullcontext(), baked=True))
        self._timed("a fresh VM booted (baked image)", t0)
        if self._stop.is_set():
            return
        self._at("making its artifact and user data")
        node = found.node = bed.nodes[0]
        testbed_ssh = bed.ssh(node.name)
        harness = PatientSsh(testbed_ssh.port, testbed_ssh.key, testbed_ssh.known_hosts)
        plan = found.plan = prepare(serving_blueprint(Path(bed.blueprint), tmp)).plan
        group = plan.node_groups[0]
        wheels = bootstrap_wheelhouse()
        keys = NodeKeysProvider().create({"cluster": plan.stack}).outs
        repo = ensure_repo(log=lambda line: None)
        site = f"http://{GUEST}:{stack.enter_context(_serve(wheels))}/"
        apt_port = stack.enter_context(_serve(repo))
        # The site's own package mirrors (an air-gapped site's): the only sources the node has.
        variables = configure_vars(thaw(plan.group_vars))
        spec = manifest(
            variables,
            group_name(group.name),
            plan.ssh_user,
            pip_args=("--no-index", "--find-links", site, "--trusted-host", GUEST),
        )
        artifact = build_artifact(spec, tmp / "artifacts")
        found.artifact_sha256 = artifact.sha256
        artifact_port = stack.enter_context(_serve(artifact.path.parent))
        text = user_data(
            ssh_user=plan.ssh_user,
            authorized_key=keys["client_public_key"],
            host_private_key=keys["host_private_key"],
            host_public_key=keys["host_public_key"],
            artifact_url=f"http://{GUEST}:{artifact_port}/{artifact.name}",
            artifact_sha256=artifact.sha256,
        )
        apt = sources_line(apt_port).strip()
        self._at("writing its package sources and user data")
        harness.run(f"rm -f /etc/apt/sources.list.d/*; echo '{apt}' > /etc/apt/sources.list")
        harness.run(
            "mkdir -p /var/lib/cloud/instance && cat > /var/lib/cloud/instance/user-data.txt"
            " && chmod 700 /var/lib/cloud/instance/user-data.txt",
            input=text,
        )
        # As cloud-init's scripts-user module runs it: root, cwd /, a bare environment, in
        # a service of its own rather than a login session (the script restarts sshd).
        t0 = time.monotonic()
        harness.run(
            "systemd-run --unit=rackform-user-data --collect --working-directory=/ "
            "--setenv=PATH=/usr/sbin:/usr/bin:/sbin:/bin /bin/sh -c "
            "'/var/lib/cloud/instance/user-data.txt > /var/log/cloud-init-output.log 2>&1'"
        )
        files = found.files = tmp / "access"
        files.mkdir()
        key, known = files / "id_ed25519", files / "known_hosts"
        key.touch(mode=0o600)
        key.write_text(keys["client_private_key"])
        known.write_text(known_hosts_line(keys["host_public_key"]))
        node_ssh = found.node_ssh = StrictSsh(node.ssh_port, key, known)
        # Behind the testbed's VMs while it configures itself (nothing waits on it but its own
        # test, which runs last); level with them again for the refresh, whose SSH has Ansible's
        # 10 s to connect.
        self._at("waiting for the node to configure itself")
        vm_priority(tmp / "vm", 10)
        try:
            found.status = self._wait_for_status(node_ssh)
        finally:
            vm_priority(tmp / "vm", 0)
        self._timed("the node configured itself (venv, the roles, serving checks)", t0)
        found.log = node_ssh.run("cat /var/log/rackform-bootstrap.log", check=False).stdout
        if not found.status.get("configured"):
            return
        # The Configure resource's refresh, from the controller over the stack's access: one
        # refresh (every role in check mode) shows both sides: with one hand edit on the node
        # it names that task on that node, and nothing else (a freshly configured node has no
        # other drift).
        props = {
            "cluster": plan.stack,
            "inventory": thaw(plan.inventory),
            "group_vars": variables,
            "content_hash": "sha256:recorded",
            "access": {"private_key": keys["client_private_key"], "known_hosts": known.read_text()},
        }
        self._at("the refresh")
        node_ssh.run("echo 'NCCL_DEBUG=TRACE' >> /etc/nccl.conf")
        t0 = time.monotonic()
        drifted = ConfigureProvider().read(f"{plan.stack}-configure", props)
        self._timed("refresh (roles in check mode) names the one hand edit, nothing else", t0)
        found.drift = drifted.outs["drift"]
        found.content_hash = drifted.outs["content_hash"]

    def _wait_for_status(self, node_ssh: Ssh) -> dict:
        deadline = time.monotonic() + CONFIGURE_TIMEOUT_S
        status = "/var/lib/rackform/bootstrap.json"
        while time.monotonic() < deadline and not self._stop.is_set():
            got = node_ssh.run(f"cat {shlex.quote(status)} 2>/dev/null", check=False)
            if got.returncode == 0 and got.stdout.strip():
                return json.loads(got.stdout)
            self._stop.wait(10)
        out = node_ssh.run("tail -n 60 /var/log/cloud-init-output.log", check=False).stdout
        raise AssertionError(
            f"no bootstrap status after {CONFIGURE_TIMEOUT_S} s; the script's output:\n{out}"
        )


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
