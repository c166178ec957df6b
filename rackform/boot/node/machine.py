"""The node's bootstrap as a small state machine over its state file: `configuring` ->
(`rebooting` -> `configuring`)* -> `done`, resumed by a systemd unit after each reboot the roles
ask for, and its outcome written, tagged on AWS, completed on the launch hook and reported.

    python3 node_bootstrap.py ARTIFACT_DIR
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rackform.boot.node.aws import Heartbeat, aws_caller
from rackform.boot.node.converge import REBOOT_REQUEST, configure, image_env
from rackform.boot.node.log import LOG, log, run
from rackform.boot.node.report import REPORT_BACKOFF_S, REPORT_TO, report_to, send_report
from rackform.boot.node.serving_job import serving_job

STATUS = Path("/var/lib/rackform/bootstrap.json")  # the outcome, written once at the end
STATE = Path("/var/lib/rackform/bootstrap-state.json")  # progress across reboots
UNIT = Path("/etc/systemd/system/rackform-bootstrap.service")
# Where the artifact's rackform.gpu collection keeps `validators/` (in the smoke_train role's
# files): the serving checks the bootstrap runs at the end (validators.serving).
VALIDATORS = "collections/ansible_collections/rackform/gpu/roles/smoke_train/files"
# A driver install needs one reboot; a role that asks again after this many is looping.
MAX_REBOOTS = 2
REBOOT = ["systemctl", "reboot"]


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
        """The read-only serving checks, then, where they passed and the cluster has a serving
        workload (`serving_job` in the spec), the serving smoke job."""
        sys.path.insert(0, str(self.root / VALIDATORS))
        from validators import serving  # the artifact's, as the collection ships them

        v = self.spec["vars"]
        checks = serving.serving_checks(
            int(self.spec.get("expect_gpus") or 0),
            str(v.get("nvidia_driver_branch", "")),
            str(v.get("nvme_raid_mount", "")),
        )
        out = [c.to_dict() for c in checks]
        job = self.spec.get("serving_job")
        if job and not any(c["status"] == "fail" for c in out):
            out += serving_job(list(job), self.root / VALIDATORS, v.get("smoke_train_venv"))
        return out

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
        """The outcome `status`, in the boot server's report format, posted to the controller
        where the user data named one."""
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
