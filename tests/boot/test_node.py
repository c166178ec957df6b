"""The node bootstrap's own logic, driven for real with stand-ins only where this machine cannot
act: the heartbeat's timing with a short interval and a recording stand-in for the AWS call;
the resume state machine across a reboot, with the reboot and systemctl injected (recorded, not
run); the boto3 program a node runs, against moto's EC2 and a recording stand-in for Auto
Scaling's lifecycle actions, which moto does not implement."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import ClassVar

import pytest
from loopback import http_server

from rackform.boot.node import aws as node_aws
from rackform.boot.node import converge as node_converge
from rackform.boot.node import log as node_log
from rackform.boot.node import virtualenv as node_virtualenv
from rackform.boot.node.aws import Heartbeat
from rackform.boot.node.machine import MAX_REBOOTS, REBOOT, Bootstrap, Paths
from rackform.targets.aws.bootstrap import HEARTBEAT_S, HOOK_TIMEOUT_S

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reap"))
from moto_server import REGION, Aws, moto_server

SHA = "ab" * 32
PASSING = [{"name": "gpu_count", "status": "pass", "measured": 4, "expected": 4}]


@pytest.fixture(autouse=True)
def _log(tmp_path, monkeypatch):
    monkeypatch.setattr(node_log, "LOG", tmp_path / "bootstrap.log")


class Node:
    """A node's disk under tmp_path and what the bootstrap did to the world, in order."""

    def __init__(self, tmp_path: Path, *, heartbeat_s: float = 0.0):
        self.root = tmp_path / "opt" / SHA
        self.root.mkdir(parents=True)
        state = tmp_path / "var-lib-rackform"
        self.paths = Paths(
            status=state / "bootstrap.json",
            state=state / "bootstrap-state.json",
            reboot_request=state / "reboot-requested",
            unit=tmp_path / "systemd" / "rackform-bootstrap.service",
            report_to=tmp_path / "etc-rackform" / "report.json",  # none: no controller
        )
        self.spec = {
            "vars": {},
            "aws": {"region": "us-east-1", "asg": "g", "hook": "h", "heartbeat_s": heartbeat_s},
        }
        self.events: list[str] = []  # "roles", "aws:<action>", "system:<argv>"
        self.checks = PASSING

    def bootstrap(self, roles) -> Bootstrap:
        def run_roles():
            self.events.append("roles")
            roles()

        return Bootstrap(
            self.root,
            self.spec,
            paths=self.paths,
            roles=run_roles,
            checks=lambda: self.checks,
            system=lambda argv: self.events.append("system:" + " ".join(argv)),
            aws=lambda action: self.events.append(f"aws:{action}"),
        )

    def request_reboot(self) -> None:  # what the nvidia_driver role does locally
        self.paths.reboot_request.parent.mkdir(parents=True, exist_ok=True)
        self.paths.reboot_request.write_text("reboot\n")

    def status(self) -> dict:
        return json.loads(self.paths.status.read_text())


def test_heartbeats_come_every_interval_while_the_block_runs_and_stop_after():
    # A stand-in records the times the AWS call would have been made.
    times: list[float] = []
    start = time.monotonic()
    with Heartbeat(lambda: times.append(time.monotonic()), 0.05):
        time.sleep(0.33)
    stopped = time.monotonic()
    time.sleep(0.15)
    # No more than one a interval over how long the block really ran (a loaded machine's sleep
    # overruns its 0.33 s: fresh run #22 saw 8 beats in a longer block), and more than one.
    assert 2 <= len(times) <= (stopped - start) / 0.05 + 1, (times, stopped - start)
    assert times[0] - start >= 0.05  # the first one interval after the start
    gaps = [b - a for a, b in zip([start, *times], times, strict=False)]
    assert all(g >= 0.045 for g in gaps), gaps
    assert all(t <= stopped for t in times)  # none after the block


def test_a_failed_heartbeat_is_logged_and_the_next_one_still_comes(tmp_path):
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise subprocess.CalledProcessError(255, ["python", "-c", "..."])

    with Heartbeat(flaky, 0.03):
        time.sleep(0.2)
    assert len(calls) >= 3
    assert "lifecycle heartbeat failed" in node_log.LOG.read_text()


def test_the_stack_heartbeats_well_within_the_hooks_timeout():
    assert HEARTBEAT_S * 5 <= HOOK_TIMEOUT_S


def test_heartbeats_go_out_while_the_roles_run_and_the_hook_completes_after(tmp_path):
    node = Node(tmp_path, heartbeat_s=0.05)
    assert node.bootstrap(lambda: time.sleep(0.3)).run() == 0
    beats = [e for e in node.events if e == "aws:heartbeat"]
    assert len(beats) >= 4
    assert node.events[-2:] == ["aws:tag", "aws:CONTINUE"]
    assert node.status()["configured"] is True and node.status()["reboots"] == 0


def test_a_reboot_resumes_at_the_next_boot_and_the_hook_completes_only_at_the_end(tmp_path):
    node = Node(tmp_path, heartbeat_s=600)
    first = node.bootstrap(node.request_reboot)
    assert first.run() == 2
    unit = node.paths.unit.name
    assert node.events == [
        "roles",
        "system:systemctl daemon-reload",
        f"system:systemctl enable {unit}",
        "aws:heartbeat",  # the reboot's time is not taken from the hook's timeout
        "system:" + " ".join(REBOOT),
    ]
    assert not node.paths.status.exists()  # no outcome yet: nothing completed, nothing tagged
    assert not node.paths.reboot_request.exists()  # consumed
    text = node.paths.unit.read_text()
    assert f"ExecStart={sys.executable} {node.root / 'node_bootstrap.py'} {node.root}" in text
    assert "WantedBy=multi-user.target" in text

    # After the boot the unit runs the script again: the roles converge (nothing to reboot
    # for now), the checks pass, the node is tagged and the hook completed, the unit removed.
    node.events.clear()
    assert node.bootstrap(lambda: None).run() == 0
    assert node.events == [
        "aws:heartbeat",
        "roles",
        "aws:tag",
        f"system:systemctl disable {unit}",
        "aws:CONTINUE",
    ]
    assert not node.paths.unit.exists()
    status = node.status()
    assert status["configured"] is True and status["reboots"] == 1
    assert status["artifact"] == SHA and status["checks"] == PASSING

    # A later boot (or a rerun of the user data) finds it done: nothing runs again.
    node.events.clear()
    assert node.bootstrap(lambda: pytest.fail("ran the roles again")).run() == 0
    assert node.events == []


def test_a_node_that_keeps_asking_for_reboots_is_abandoned(tmp_path):
    node = Node(tmp_path)
    for _ in range(MAX_REBOOTS):
        assert node.bootstrap(node.request_reboot).run() == 2
    node.events.clear()
    assert node.bootstrap(node.request_reboot).run() == 1
    assert node.events[-1] == "aws:ABANDON" and "aws:tag" not in node.events
    assert f"after {MAX_REBOOTS} reboots" in node.status()["error"]


def test_failed_roles_or_checks_abandon_the_node_untagged(tmp_path):
    def broken():
        raise subprocess.CalledProcessError(2, ["ansible-playbook"])

    node = Node(tmp_path / "roles")
    assert node.bootstrap(broken).run() == 1
    assert node.events == ["roles", "aws:ABANDON"]
    assert "configuration failed" in node.status()["error"]

    node = Node(tmp_path / "checks")
    node.checks = [{"name": "gpu_count", "status": "fail", "measured": 3, "expected": 4}]
    assert node.bootstrap(lambda: None).run() == 1
    assert node.events == ["roles", "aws:ABANDON"]
    assert node.status()["error"] == "serving checks failed: gpu_count"
    assert node.status()["checks"] == node.checks


def test_another_artifacts_progress_is_not_resumed(tmp_path):
    node = Node(tmp_path)
    node.paths.state.parent.mkdir(parents=True)
    node.paths.state.write_text(json.dumps({"artifact": "cd" * 32, "phase": "done", "ok": True}))
    assert node.bootstrap(lambda: None).run() == 0
    assert node.events[0] == "roles"


class _Lifecycle(http.server.BaseHTTPRequestHandler):
    """Auto Scaling's query API, answering the two lifecycle actions (moto has neither):
    records each request's parameters."""

    calls: ClassVar[list[dict[str, str]]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        params = dict(urllib.parse.parse_qsl(body))
        type(self).calls.append(params)
        action = params["Action"]
        answer = (
            f'<{action}Response xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">'
            f"<{action}Result/><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata>"
            f"</{action}Response>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def test_the_nodes_aws_calls_tag_heartbeat_and_complete(tmp_path, monkeypatch):
    # The program the node runs in its virtualenv, run here with this Python's boto3: EC2 is
    # moto's server, Auto Scaling's lifecycle actions a recording stand-in (moto has none).
    monkeypatch.setattr(node_aws, "VENV", Path(sys.executable).parent.parent)
    _Lifecycle.calls = []
    with moto_server() as endpoint, http_server(_Lifecycle) as port:
        aws = Aws(endpoint)
        (iid,) = aws.group("llm-serve-a-prod-serve", "llm-serve-a", 1)
        for key, value in {
            "AWS_ENDPOINT_URL_EC2": endpoint,
            "AWS_ENDPOINT_URL_AUTO_SCALING": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }.items():
            monkeypatch.setenv(key, value)
        spec = {"region": REGION, "asg": "llm-serve-a-prod-serve", "hook": "rackform-configure"}
        call = node_aws.aws_caller(spec, SHA, instance_id=lambda: iid)
        for action in ("heartbeat", "tag", "CONTINUE"):
            call(action)
        assert aws.tags(iid)["rackform:configured"] == SHA
    want = {
        "LifecycleHookName": "rackform-configure",
        "AutoScalingGroupName": "llm-serve-a-prod-serve",
        "InstanceId": iid,
    }
    beat, done = _Lifecycle.calls
    assert beat == {"Action": "RecordLifecycleActionHeartbeat", "Version": "2011-01-01", **want}
    assert done == {
        "Action": "CompleteLifecycleAction",
        "Version": "2011-01-01",
        "LifecycleActionResult": "CONTINUE",
        **want,
    }


# The node's virtualenv, made for real with this machine's Python: no pip index is reached (the
# pip wheel Python bundles is the only source), as on a node whose mirror is its own.


def test_the_virtualenv_gets_pip_from_the_bundled_wheel_without_ensurepip(tmp_path):
    wheel = node_virtualenv.bundled_pip()
    assert wheel is not None, "this machine's Python bundles no pip wheel"
    root = tmp_path / "venv"
    pip = node_virtualenv.venv(root)
    assert pip[1] == f"{wheel}/pip"  # pip runs from the wheel, not from the virtualenv
    subprocess.run([*pip, "-q", "--no-compile", "--no-index"], check=True)
    version = wheel.name.split("-")[1]
    shown = subprocess.run(
        [root / "bin" / "python", "-m", "pip", "--version"], capture_output=True, text=True
    )
    assert shown.stdout.startswith(f"pip {version} from {root}"), shown
    site = next((root / "lib").glob("python3*/site-packages"))
    installed = {p.name.split("-")[0] for p in site.glob("*.dist-info")}
    assert installed == {"pip"}  # no setuptools: ensurepip never ran
    assert not list(site.rglob("*.pyc"))  # --no-compile
    # Run again (a resumed bootstrap after a reboot): the same command line, nothing to do.
    assert node_virtualenv.venv(root) == pip
    subprocess.run([*pip, "-q", "--no-compile", "--no-index"], check=True)


def test_without_a_bundled_wheel_the_virtualenv_is_pythons_own(tmp_path, monkeypatch):
    monkeypatch.setattr(node_virtualenv, "bundled_pip", lambda: None)
    root = tmp_path / "venv"
    assert node_virtualenv.venv(root) == [str(root / "bin" / "python"), "-m", "pip", "install"]
    assert (root / "bin" / "pip").exists()


def test_the_newest_pip_wheel_of_the_first_directory_that_has_one(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    for name in ("pip-9.0.3-py2.py3-none-any.whl", "pip-23.0.1-py3-none-any.whl"):
        (first / name).touch()
    (second / "pip-25.1-py3-none-any.whl").touch()
    (second / "setuptools-80.0-py3-none-any.whl").touch()
    assert node_virtualenv.bundled_pip((tmp_path / "none", first, second)).name.startswith(
        "pip-23.0.1-"
    )
    assert node_virtualenv.bundled_pip((tmp_path / "none",)) is None


def test_pip_is_not_run_where_the_virtualenv_has_every_pin(tmp_path):
    # A node of a baked image: the bake installed the pinned ansible-core into the same
    # virtualenv. A real virtualenv with pip in it; pip's own version is the pin it has.
    root = tmp_path / "venv"
    subprocess.run([*node_virtualenv.venv(root), "-q", "--no-compile", "--no-index"], check=True)
    python = root / "bin" / "python"
    have = subprocess.run(
        [python, "-m", "pip", "--version"], capture_output=True, text=True
    ).stdout.split()[1]
    assert node_virtualenv.has_pinned(python, [f"pip=={have}"])
    # Another version, a range, a package it lacks, a name with hyphens: pip runs.
    assert not node_virtualenv.has_pinned(python, [f"pip=={have}.1"])
    assert not node_virtualenv.has_pinned(python, ["pip>=1"])
    assert not node_virtualenv.has_pinned(python, [f"pip=={have}", "ansible-core==2.19.14"])
    assert not node_virtualenv.has_pinned(python, ["no-such-package==1.0"])
    assert not node_virtualenv.has_pinned(python, [])
    assert not node_virtualenv.has_pinned(tmp_path / "nowhere" / "python", [f"pip=={have}"])


def test_the_roles_run_under_mitogen_where_the_virtualenv_holds_it(tmp_path):
    # This machine's virtualenv has Mitogen (the deploy extra), as the node's gets it
    # (node_requirements): the node's own ansible-playbook with what `strategy` gives runs a
    # play's modules in Mitogen's interpreter (its argv names it: `python(mitogen:...)`).
    env, args = node_converge.strategy(Path(sys.prefix))
    assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert args == ["-e", "rackform_free_strategy=mitogen_free"]
    book = tmp_path / "play.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n"
        "  strategy: \"{{ rackform_free_strategy | default('free') }}\"\n  tasks:\n"
        "    - ansible.builtin.shell: tr '\\\\0' ' ' < /proc/$PPID/cmdline\n"
        "      register: parent\n"
        "    - ansible.builtin.assert:\n        that: \"'(mitogen:' in parent.stdout\"\n"
    )
    playbook = Path(sys.executable).with_name("ansible-playbook")
    proc = subprocess.run(
        [playbook, "-i", "localhost,", "-c", "local", *args, book,
         "-e", f"ansible_python_interpreter={sys.executable}"],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "ok=2" in proc.stdout
    # A virtualenv without it: Ansible's own strategies, nothing set.
    assert node_converge.strategy(tmp_path / "bare-venv") == ({}, [])
