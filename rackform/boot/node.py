"""Runs on a node at first boot, as root, from the unpacked bootstrap artifact (see
rackform/boot/artifact.py): installs ansible-core in a virtualenv, runs the site playbook over
`localhost` with the node group's configuration variables, checks the node as a serving node
(validators/serving.py, from the validators the artifact's collection carries) and reports the
outcome.

Standard library only, and Python 3.10 (Ubuntu 22.04's): nothing of rackform is installed on
the node. On AWS it then tags the instance `rackform:configured=<artifact sha256>` (the
cluster's inventory lists only configured nodes) and completes the autoscaling group's launch
lifecycle hook, CONTINUE or ABANDON, so a node reports healthy only once configured and checked.

Reporting: where the user data wrote `REPORT_TO` (a node that has a controller to report to,
as on bare metal: rackform/boot/controller.py), the outcome goes to the controller's boot
server at the end, in its report format (rackform/boot/reports.py), configured or failed with
the error and the checks, tried again with a growing wait while the server cannot be reached; a
report that cannot be sent is logged and changes nothing of the outcome. Without the file (an
autoscaling group's nodes on AWS) nothing is posted. The file holds the node's own token (its
credential for the round, rackform/boot/credentials.py): each request is signed with it
(`signature`, over the method, the path and the body), the token itself never sent; where the
server is https, the file may hold the CA bundle ("ca") the node verifies it against.

Long runs: while the roles run it sends `RecordLifecycleActionHeartbeat` every `heartbeat_s`
(the stack sets a fraction of the hook's timeout, rackform/targets/aws/bootstrap.py), so a
bootstrap longer than the timeout is not abandoned (Auto Scaling user guide, "Amazon EC2 Auto
Scaling lifecycle hooks": a heartbeat restarts the timeout).

Reboots: Ansible's reboot module refuses a local connection, so the nvidia_driver role, run
here, writes `REBOOT_REQUEST` and ends the play for this host instead. This script then records
its progress (`STATE`), installs a systemd unit that runs it again at the next boot, and
reboots; the run after the boot converges again (every role is idempotent: what was done
reports ok) and goes on from there. The hook is completed only at the real end, never before
a reboot; a node that asks for more than `MAX_REBOOTS` reboots is abandoned.

    python3 node_bootstrap.py ARTIFACT_DIR   (this file, as the artifact names it)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import ssl
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

VENV = Path("/opt/rackform/venv")
STATUS = Path("/var/lib/rackform/bootstrap.json")  # the outcome, written once at the end
STATE = Path("/var/lib/rackform/bootstrap-state.json")  # progress across reboots
# Written by the nvidia_driver role (nvidia_driver_reboot_request_file) under a local
# connection when the new driver needs a reboot.
REBOOT_REQUEST = Path("/var/lib/rackform/reboot-requested")
UNIT = Path("/etc/systemd/system/rackform-bootstrap.service")
LOG = Path("/var/log/rackform-bootstrap.log")
# Where to report the outcome, written by the user data where the node has a controller to
# report to: {"url", "token"} and the node's name, "node" (without it: the host name), and where
# the server is https with a certificate of the site's own CA, that CA bundle ("ca", PEM).
REPORT_TO = Path("/etc/rackform/report.json")
# How a request to the boot server says whose it is: `Authorization: Rackform-Node
# <node>:<signature>` (rackform/boot/serve.py checks it).
AUTH_SCHEME = "Rackform-Node"
IMDS = "http://169.254.169.254/latest"
# The site playbook of the rackform.gpu collection, by its name in the collection (Ansible finds
# it through ANSIBLE_COLLECTIONS_PATH, the artifact's collections/).
SITE = "rackform.gpu.site"
# Where the artifact's rackform.gpu collection keeps `validators/` (in the smoke_train role's
# files): the serving checks this script runs at the end (validators/serving.py).
VALIDATORS = "collections/ansible_collections/rackform/gpu/roles/smoke_train/files"
# A driver install needs one reboot; a role that asks again after this many is looping.
MAX_REBOOTS = 2
REBOOT = ["systemctl", "reboot"]
# Posting the report: this many tries, the waits between them doubling from the first up to
# the last (5 + 10 + 20 + 40 + 60 + 60 + 60 s: the controller may be away for four minutes).
REPORT_TRIES = 8
REPORT_BACKOFF_S = (5.0, 60.0)


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


# Where Python keeps the pip wheel its ensurepip installs: Debian and Ubuntu in
# /usr/share/python-wheels (python3-pip-whl, which python3-venv depends on), a build of its own
# where its configure was told (WHEEL_PKG_DIR), an upstream build in ensurepip/_bundled.
WHEEL_DIRS = (
    Path("/usr/share/python-wheels"),
    Path(sysconfig.get_config_var("WHEEL_PKG_DIR") or "/nonexistent"),
    Path(sysconfig.get_paths()["stdlib"]) / "ensurepip" / "_bundled",
)


def bundled_pip(dirs: tuple[Path, ...] = WHEEL_DIRS) -> Path | None:
    """The newest pip wheel in the first of `dirs` that has one, or None."""
    for d in dirs:
        found = sorted(d.glob("pip-*.whl"), key=lambda w: _release(_version(w)))
        if found:
            return found[-1]
    return None


def _version(wheel: Path) -> str:
    """A wheel's version, from its file name (`pip-23.0.1-py3-none-any.whl`: 23.0.1)."""
    return wheel.name.split("-")[1]


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


def venv(root: Path = VENV, wheel: Path | None = None) -> list[str]:
    """A virtualenv at `root`, and the pip command line that installs into it; python3-venv
    from apt first where the image lacks it.

    The virtualenv is made without pip, and pip runs straight from the wheel Python bundles (as
    pip's installation guide allows: `python pip.whl/pip install ...`), installing itself in the
    same run as the requirements: `python3 -m venv` would first install pip and setuptools from
    those wheels and byte-compile both, the longest part of the step on a slow node. Without a
    bundled wheel, the plain `python3 -m venv` and the virtualenv's pip."""
    python = root / "bin" / "python"
    made = python.exists()  # by a run before a reboot: python3-venv is there already
    if not made:
        probe = subprocess.run(
            [sys.executable, "-m", "ensurepip", "--version"], capture_output=True
        )
        if probe.returncode != 0:
            run(["apt-get", "update", "-q"])
            run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "python3-venv"])
    wheel = wheel or bundled_pip()
    if wheel is None:
        if not made:
            run([sys.executable, "-m", "venv", str(root)])
        return [str(python), "-m", "pip", "install"]
    if not made:
        run([sys.executable, "-m", "venv", "--without-pip", str(root)])
    pin = f"pip=={_version(wheel)}"
    return [str(python), f"{wheel}/pip", "install", "--find-links", str(wheel.parent), pin]


def has_pinned(python: Path, requirements: list[str]) -> bool:
    """The virtualenv of `python` has every requirement, each an exact pin (`name==version`),
    at that version: what a node image's bake installed, which pip need not resolve again (a
    minute of a node's boot on an emulated CPU). A range, or anything unreadable: False."""
    pins = [r.split("==", 1) for r in requirements]
    if not pins or any(len(p) != 2 or not p[0] or not p[1] for p in pins) or not python.exists():
        return False
    code = (
        "import importlib.metadata as m, sys\n"
        "def have(n, v):\n"
        "    try:\n        return m.version(n) == v\n"
        "    except m.PackageNotFoundError:\n        return False\n"
        "sys.exit(0 if all(have(n, v) for n, v in zip(sys.argv[1::2], sys.argv[2::2])) else 1)"
    )
    args = [x.strip() for p in pins for x in p]
    return subprocess.run([str(python), "-c", code, *args], capture_output=True).returncode == 0


def inventory(
    spec: dict, reboot_request: Path = REBOOT_REQUEST, host_vars: dict | None = None
) -> dict:
    """The node as the one host of its group, with its own variables where the controller
    gave them (`host_vars`: its rack, its NVMe drives: the node's file, `report_to`)."""
    host = {
        **(host_vars or {}),
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "nvidia_driver_reboot_request_file": str(reboot_request),
    }
    return {
        "all": {
            "vars": spec["vars"],
            "children": {
                "gpu_nodes": {"children": {spec["group"]: {"hosts": {"localhost": host}}}}
            },
        }
    }


def configure(
    root: Path,
    spec: dict,
    reboot_request: Path = REBOOT_REQUEST,
    extra_env: dict | None = None,
    host_vars: dict | None = None,
) -> None:
    requirements = spec["pip"]["requirements"]
    if has_pinned(VENV / "bin" / "python", requirements):
        log(f"{VENV} has {', '.join(requirements)} (the node image's): pip not run")
    else:
        # --no-compile: what the node imports is byte-compiled on first import, and only that.
        pip = [*venv(), "-q", "--no-compile", *spec["pip"]["args"]]
        run([*pip, *requirements])
    inv = root / "inventory.json"
    inv.write_text(json.dumps(inventory(spec, reboot_request, host_vars)), encoding="utf-8")
    env = {
        "ANSIBLE_COLLECTIONS_PATH": str(root / "collections"),
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_LOCAL_TEMP": str(root / ".ansible-tmp"),
        # The node is its own controller: each module runs from stdin rather than from a file
        # written, made executable and removed for it (three fewer processes a task), and the
        # controller's processes look at each other every 50 ms, not every 1 ms (Ansible's
        # INTERNAL_POLL_INTERVAL: "higher values are more suitable ... when CPU usage might be
        # a concern"), leaving the node's CPU to the modules. On a testbed VM under emulation
        # the roles' run took 569 s against 660 s.
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_INTERNAL_POLL_INTERVAL": "0.05",
    }
    strategy_env, strategy_args = strategy()
    playbook = [str(VENV / "bin" / "ansible-playbook"), "-i", str(inv), *strategy_args, SITE]
    run(playbook, env={**env, **strategy_env, **(extra_env or {})}, cwd=str(root))


def strategy(venv_root: Path = VENV) -> tuple[dict, list[str]]:
    """The environment and arguments that run the roles under Mitogen's strategies, where the
    virtualenv holds Mitogen (`node_requirements` installs it): the node's one Python interpreter
    runs every task's module, rather than a new one a task that imports Ansible's module code
    again (most of a task's time on a small or emulated CPU). Nothing where it does not: Ansible's
    own strategies, the same plays."""
    found = sorted(venv_root.glob("lib/python3*/site-packages/ansible_mitogen/plugins/strategy"))
    if not found:
        return {}, []
    env = {
        "ANSIBLE_STRATEGY_PLUGINS": str(found[-1]),
        "ANSIBLE_STRATEGY": "mitogen_linear",
        # Its timeout covers its interpreter's start too (the controller's reason: push/strategy.py).
        "ANSIBLE_TIMEOUT": "30",
    }
    return env, ["-e", "rackform_free_strategy=mitogen_free"]


def image_env(root: Path, spec: dict) -> dict:
    """Where the blueprint bakes a node image: whether this node's image holds what the
    blueprint's roles install (image_check.py, shipped beside this script then); the tags it
    holds are skipped, and a mismatch is configured in full with a WARNING line."""
    if not spec.get("image"):
        return {}
    sys.path.insert(0, str(root))
    from image_check import ansible_env, check

    result = check(spec["image"])
    if result.warning:
        log(result.warning)
    elif result.skip:
        log(f"the node image holds {', '.join(result.skip)}: those tags are not run again")
    return ansible_env(result)


class RedirectRefused(urllib.error.URLError):
    """A redirect this script does not follow; `reason` is the line to log."""


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


class SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, followed only on the same origin (scheme, host, port): every request
    this script makes carries a token (the report's bearer, IMDS's), which urllib's own handler
    would send to any host a redirect names, https to http included. The rule of
    rackform/http_opener.py, in the few lines a node needs (nothing of rackform is here)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = urllib.parse.urljoin(req.full_url, newurl)
        if _origin(new) != _origin(req.full_url):
            fp.close()
            shown = " to ".join(u.split("?")[0] for u in (req.full_url, new))
            raise RedirectRefused(
                f"refused a redirect ({code}) from {shown}: credentials are not sent to another host"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def urlopen(req: urllib.request.Request, timeout: float, context: ssl.SSLContext | None = None):
    """`req` opened with redirects followed on the same origin only; over TLS with `context`
    where given (the site's CA)."""
    https = [urllib.request.HTTPSHandler(context=context)] if context is not None else []
    return urllib.request.build_opener(SameOriginRedirects, *https).open(req, timeout=timeout)


def imds(path: str) -> str:
    """IMDSv2 (the launch template requires tokens)."""
    token_req = urllib.request.Request(
        f"{IMDS}/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"},
    )
    token = urlopen(token_req, timeout=5).read().decode()
    req = urllib.request.Request(
        f"{IMDS}/meta-data/{path}", headers={"X-aws-ec2-metadata-token": token}
    )
    return urlopen(req, timeout=5).read().decode()


# The AWS calls a joining node makes, through boto3 in the virtualenv with the instance
# profile's credentials (rackform/targets/aws/bootstrap.py's node_policy allows each).
AWS_PROGRAM = """\
import boto3, sys
action, region, iid, asg, hook, sha = sys.argv[1:7]
if action == 'tag':
    boto3.client('ec2', region_name=region).create_tags(
        Resources=[iid], Tags=[{'Key': 'rackform:configured', 'Value': sha}])
elif action == 'heartbeat':
    boto3.client('autoscaling', region_name=region).record_lifecycle_action_heartbeat(
        LifecycleHookName=hook, AutoScalingGroupName=asg, InstanceId=iid)
else:
    boto3.client('autoscaling', region_name=region).complete_lifecycle_action(
        LifecycleHookName=hook, AutoScalingGroupName=asg, InstanceId=iid,
        LifecycleActionResult=action)
"""


def aws_caller(aws: dict, sha: str, instance_id: Callable[[], str] = lambda: imds("instance-id")):
    """`call(action)` for action tag | heartbeat | CONTINUE | ABANDON."""
    iid: list[str] = []

    def call(action: str) -> None:
        if not iid:
            iid.append(instance_id())
        argv = [action, aws["region"], iid[0], aws.get("asg", ""), aws.get("hook", ""), sha]
        run([str(VENV / "bin" / "python"), "-c", AWS_PROGRAM, *argv])

    return call


def signature(token: str, method: str, target: str, body: bytes = b"") -> str:
    """The node's signature of one request to the boot server: HMAC-SHA256, keyed with its
    token, of the method, the request target (the URL's path) and the body's sha256. Whoever
    sees the request (plain HTTP) learns neither the token nor how to sign another body."""
    message = f"{method}\n{target}\n{hashlib.sha256(body).hexdigest()}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def authorization(node: str, token: str, method: str, target: str, body: bytes = b"") -> str:
    """The Authorization header of a request `node` makes with its `token`."""
    return f"{AUTH_SCHEME} {node}:{signature(token, method, target, body)}"


def tls_context(ca: str) -> ssl.SSLContext | None:
    """What an https request verifies the server against: the CA bundle `ca` (PEM) where the
    controller gave one, else the system's (None: urllib's default)."""
    return ssl.create_default_context(cadata=ca) if ca else None


def report_to(path: Path = REPORT_TO) -> dict | None:
    """Where this node reports, as the user data wrote it ({"url", "token", "node", "vars": its
    own inventory variables, "ca": the CA bundle for an https server, or ""}; the node defaults
    to the host name), or None where it was told of no controller (no file, as on an
    autoscaling group's nodes on AWS) or the file is unreadable (logged)."""
    try:
        to = json.loads(path.read_text(encoding="utf-8"))
        to = {
            "url": str(to["url"]).rstrip("/"),
            "token": str(to["token"]),
            "node": to.get("node"),
            "vars": dict(to.get("vars") or {}),
            "ca": str(to.get("ca") or ""),
        }
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log(f"{path} is unreadable ({exc}): no report is sent")
        return None
    return {**to, "node": to["node"] or socket.gethostname()}


def send_report(
    to: dict,
    report: dict,
    *,
    tries: int = REPORT_TRIES,
    backoff_s: tuple[float, float] = REPORT_BACKOFF_S,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """POST `report` to the controller's boot server (rackform/boot/serve.py), as `to` says,
    signed with the node's token; True once it took it. A connection that fails, or an answer
    of 408 or 5xx, is tried again after a wait; a refusal (4xx: a wrong credential, a node the
    controller does not know, a report it does not take) is not. Never raises: the node's
    outcome does not depend on its report."""
    body = json.dumps({**report, "node": to["node"]}).encode()
    url = f"{to['url']}/report/{urllib.parse.quote(to['node'], safe='')}"
    target = urllib.parse.urlsplit(url).path
    headers = {
        "Authorization": authorization(to["node"], to["token"], "POST", target, body),
        "Content-Type": "application/json",
    }
    wait, longest = backoff_s
    for attempt in range(1, tries + 1):
        try:
            req = urllib.request.Request(url, data=body, headers=headers, method="POST")
            context = tls_context(to.get("ca") or "")
            with urlopen(req, timeout=30, context=context) as answer:
                answer.read()
            log(f"reported {report['outcome']} to {to['url']} as {to['node']}")
            return True
        except urllib.error.HTTPError as exc:
            # The controller's words, as printable text: a log line is read on a terminal.
            said = exc.read(512).decode("utf-8", "replace").strip()
            why = f"{exc.code} {said.encode('unicode_escape').decode('ascii')}"
            if exc.code != 408 and exc.code < 500:
                log(f"the controller refused the report ({why}); not sending it again")
                return False
        except RedirectRefused as exc:
            log(f"reporting to {to['url']}: {exc.reason}; not sending it again")
            return False
        except (OSError, ValueError) as exc:  # ValueError: a URL urllib cannot use
            why = str(exc)
        if attempt == tries:
            log(f"could not report to {to['url']} ({why}) after {tries} tries; giving up")
            return False
        log(f"reporting to {to['url']}: {why}; trying again in {wait:.0f} s")
        sleep(wait)
        wait = min(wait * 2, longest)
    return False


class Heartbeat:
    """Calls `send` every `interval_s` seconds while the block runs (the first call one
    interval after the start); a failed call is logged and the next one still comes."""

    def __init__(self, send: Callable[[], None] | None, interval_s: float):
        self.send, self.interval_s = send, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.send()  # type: ignore[misc]
            except Exception as exc:  # one failed heartbeat must not end the bootstrap
                log(f"lifecycle heartbeat failed: {exc}")

    def __enter__(self) -> Heartbeat:
        if self.send is not None and self.interval_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def resume_unit(root: Path, python: str = sys.executable) -> str:
    """The systemd unit that runs this script again at the next boot (cloud-init runs user
    data once per instance, so nothing else would)."""
    return (
        "[Unit]\n"
        "Description=rackform node bootstrap, resumed after the reboot it asked for\n"
        "Wants=network-online.target\n"
        "After=network-online.target\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"ExecStart={python} {root / 'node_bootstrap.py'} {root}\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


@dataclass(frozen=True)
class Paths:
    status: Path = STATUS
    state: Path = STATE
    reboot_request: Path = REBOOT_REQUEST
    unit: Path = UNIT
    report_to: Path = REPORT_TO


class Bootstrap:
    """The node's bootstrap as a small state machine over `Paths.state`: `configuring` ->
    (`rebooting` -> `configuring`)* -> `done`. What touches the machine is injected, so a test
    drives it with recording stand-ins: `roles()` (the site playbook), `checks()` (the
    serving checks), `system(argv)` (systemctl: enable the resume unit, reboot) and `aws(action)`
    (the AWS calls; None off AWS). Where `Paths.report_to` exists, the outcome is also posted to
    the controller it names, at the end (and again by a later run that finds the end reached,
    in case the first post never arrived); `report_backoff_s` is `send_report`'s."""

    def __init__(
        self,
        root: Path,
        spec: dict,
        *,
        paths: Paths = Paths(),
        roles: Callable[[], None] | None = None,
        checks: Callable[[], list[dict]] | None = None,
        system: Callable[[list[str]], None] = run,
        aws: Callable[[str], None] | None = None,
        report_backoff_s: tuple[float, float] = REPORT_BACKOFF_S,
    ):
        self.root, self.spec, self.paths, self.system, self.aws = root, spec, paths, system, aws
        self.report_backoff_s = report_backoff_s
        self.sha = root.name
        self.roles = roles or (
            lambda: configure(
                root,
                spec,
                paths.reboot_request,
                image_env(root, spec),
                (report_to(paths.report_to) or {}).get("vars"),
            )
        )
        self.checks = checks or self._serving_checks
        self.heartbeat_s = float((spec.get("aws") or {}).get("heartbeat_s") or 0)

    def _serving_checks(self) -> list[dict]:
        sys.path.insert(0, str(self.root / VALIDATORS))
        from validators import serving  # the artifact's, as the collection ships them

        v = self.spec["vars"]
        checks = serving.serving_checks(
            int(self.spec.get("expect_gpus") or 0),
            str(v.get("nvidia_driver_branch", "")),
            str(v.get("nvme_raid_mount", "")),
        )
        return [c.to_dict() for c in checks]

    def state(self) -> dict:
        try:
            state = json.loads(self.paths.state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            state = {}
        if state.get("artifact") != self.sha:  # another artifact's progress is not ours
            state = {"artifact": self.sha, "phase": "configuring", "reboots": 0}
            state["started"] = time.time()
        return state

    def save(self, state: dict) -> None:
        self.paths.state.parent.mkdir(parents=True, exist_ok=True)
        self.paths.state.write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")

    def beat(self) -> None:
        if self.aws is not None and self.heartbeat_s:
            self.aws("heartbeat")

    def run(self) -> int:
        """0: configured and checked (or done before); 1: failed (the hook is abandoned);
        2: rebooting (the unit runs this again after the boot)."""
        state = self.state()
        if state["phase"] == "done":
            log(f"bootstrap of {self.sha[:12]} already finished; nothing to do")
            try:
                self._report(json.loads(self.paths.status.read_text(encoding="utf-8")))
            except (OSError, ValueError) as exc:
                log(f"no outcome to report again: {exc}")
            return 0 if state.get("ok") else 1
        if state["phase"] == "rebooting":
            log(f"resumed after reboot {state['reboots']}")
            state["phase"] = "configuring"
            self.save(state)
            self._quiet(self.beat)  # the reboot took part of the hook's timeout
        self.save(state)
        send = (lambda: self.aws("heartbeat")) if self.aws is not None else None
        error, checks = "", []
        with Heartbeat(send, self.heartbeat_s):
            try:
                self.roles()
            except (OSError, subprocess.CalledProcessError) as exc:
                error = f"configuration failed: {exc} (the log above says where)"
            if not error and self.paths.reboot_request.exists():
                if state["reboots"] >= MAX_REBOOTS:
                    error = f"the roles asked for a reboot again after {MAX_REBOOTS} reboots"
                else:
                    return self._reboot(state)
            if not error:
                checks = self.checks()
                bad = [c["name"] for c in checks if c["status"] == "fail"]
                error = f"serving checks failed: {', '.join(bad)}" if bad else ""
        return self._finish(state, error, checks)

    def _reboot(self, state: dict) -> int:
        state["reboots"] += 1
        state["phase"] = "rebooting"
        self.save(state)
        self.paths.reboot_request.unlink()
        self.paths.unit.parent.mkdir(parents=True, exist_ok=True)
        self.paths.unit.write_text(resume_unit(self.root), encoding="utf-8")
        self.system(["systemctl", "daemon-reload"])
        self.system(["systemctl", "enable", self.paths.unit.name])
        self._quiet(self.beat)
        log(f"rebooting for the roles (reboot {state['reboots']} of at most {MAX_REBOOTS})")
        self.system(REBOOT)
        return 2

    def _finish(self, state: dict, error: str, checks: list[dict]) -> int:
        if not error and self.aws is not None:
            # Tagged only when configured and checked: the cluster's inventory is the tagged
            # nodes, so a node that could not tag itself would serve unseen; it is abandoned.
            try:
                self.aws("tag")
            except (OSError, subprocess.CalledProcessError) as exc:
                error = f"could not tag the instance as configured: {exc}"
        ok = not error
        if error:
            log(error)
        status = {
            "artifact": self.sha,
            "configured": ok,
            "error": error,
            "checks": checks,
            "reboots": state["reboots"],
            "seconds": round(time.time() - state.get("started", time.time()), 1),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self.paths.status.parent.mkdir(parents=True, exist_ok=True)
        self.paths.status.write_text(json.dumps(status, indent=1) + "\n", encoding="utf-8")
        log(f"{'configured' if ok else 'NOT configured'} in {status['seconds']} s")
        if self.paths.unit.exists():
            self._quiet(lambda: self.system(["systemctl", "disable", self.paths.unit.name]))
            self.paths.unit.unlink()
        self.save({**state, "phase": "done", "ok": ok})
        if self.aws is not None and self.spec["aws"].get("hook"):
            # Only now, at the real end: never before a reboot.
            self._quiet(lambda: self.aws("CONTINUE" if ok else "ABANDON"))
        self._report(status)
        return 0 if ok else 1

    def _report(self, status: dict) -> None:
        """The outcome `status`, in the report format (rackform/boot/reports.py), posted to the
        controller where the user data named one."""
        to = report_to(self.paths.report_to)
        if to is None:
            return
        report = {
            "artifact": status["artifact"],
            "outcome": "configured" if status["configured"] else "failed",
            "error": status["error"],
            "checks": status["checks"],
        }
        send_report(to, report, backoff_s=self.report_backoff_s)

    @staticmethod
    def _quiet(call: Callable[[], None]) -> None:
        try:
            call()
        except (OSError, subprocess.CalledProcessError) as exc:
            log(f"{exc}")


def main(root: Path) -> int:
    LOG.parent.mkdir(parents=True, exist_ok=True)
    spec = json.loads((root / "bootstrap.json").read_text(encoding="utf-8"))
    aws = aws_caller(spec["aws"], root.name) if spec.get("aws") else None
    code = Bootstrap(root, spec, aws=aws).run()
    # Rebooting is no failure of the user-data script or the unit: the next boot goes on.
    return 0 if code == 2 else code


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).resolve()))
