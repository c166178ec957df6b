"""Powering a host off through its BMC's Redfish API (DMTF Redfish: ComputerSystem.Reset).

Credentials come from the environment variables or the file the blueprint names; they go into
the Authorization header and nowhere else: no message, log line or audit entry carries them,
and no request to another host (a redirect elsewhere is refused: `http_opener`; a
system path the BMC names is used only as a path on the BMC itself)."""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

from rackform import http_opener
from rackform.blueprint.targets.onprem.host_spec import Bmc
from rackform.lifecycle.outcome import ActionError
from rackform.noanswer import no_answer


class BmcError(ActionError):
    """The BMC could not be used (credentials, refused, unreachable, too slow): one line."""


def credentials(bmc: Bmc, base: Path) -> tuple[str, str]:
    """(user, password) from the named environment variables or file; never shown."""
    if bmc.credentials_file is not None:
        path = Path(bmc.credentials_file).expanduser()
        path = path if path.is_absolute() else base / path
        try:
            text = path.read_text().strip()
        except OSError as exc:
            raise BmcError(f"cannot read the BMC credentials file {path}: {exc.strerror}") from None
        user, sep, password = text.partition(":")
        if not sep or not user:
            raise BmcError(f"the BMC credentials file {path} does not hold user:password")
        return user, password
    user = os.environ.get(bmc.username_env or "")
    password = os.environ.get(bmc.password_env or "")
    if not user or password is None:
        unset = bmc.username_env if not user else bmc.password_env
        raise BmcError(f"the BMC credentials variable {unset} is not set")
    return user, password


class Redfish:
    def __init__(self, bmc: Bmc, base: Path):
        self.bmc = bmc
        self.root = bmc.address.rstrip("/")
        user, password = credentials(bmc, base)
        self._headers = {**http_opener.basic_auth(user, password), "Accept": "application/json"}
        self._ssl = None
        if self.root.startswith("https://") and not bmc.verify_tls:
            self._ssl = ssl.create_default_context()
            self._ssl.check_hostname = False
            self._ssl.verify_mode = ssl.CERT_NONE

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        headers = dict(self._headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.root + path, data=data, headers=headers, method=method)
        try:
            with http_opener.urlopen(req, timeout=self.bmc.timeout_s, context=self._ssl) as r:
                raw = r.read()
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise BmcError(
                    f"BMC {self.root} refused the credentials (HTTP {exc.code})"
                ) from None
            raise BmcError(f"BMC {self.root} answered HTTP {exc.code} to {method} {path}") from None
        except OSError as exc:  # a URLError, or a timeout while reading the answer
            raise BmcError(no_answer(f"BMC {self.root}", exc, self.bmc.timeout_s)) from None
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            raise BmcError(f"BMC {self.root} answered {method} {path} with no JSON") from None

    def system(self) -> str:
        """The ComputerSystem's path: the one the blueprint names, else the BMC's only one."""
        if self.bmc.system:
            return f"/redfish/v1/Systems/{self.bmc.system}"
        members = self._call("GET", "/redfish/v1/Systems").get("Members", [])
        if len(members) != 1:
            raise BmcError(f"BMC {self.root} has {len(members)} systems; name one with bmc.system")
        path = str(members[0].get("@odata.id", "")).removeprefix(self.root)
        # A path on this BMC, never one that would make `root + path` another host or port.
        if not path.startswith("/"):
            raise BmcError(f"BMC {self.root} named its system {path[:80]!r}, not a path on it")
        return path

    def power_state(self, system: str) -> str:
        return str(self._call("GET", system).get("PowerState", "Unknown"))

    def reset(self, system: str, kind: str) -> None:
        self._call("POST", f"{system}/Actions/ComputerSystem.Reset", {"ResetType": kind})

    def power_off(
        self,
        timeout_s: float,
        force: bool = False,
        poll_s: float = 2.0,
        clock=time.monotonic,
        sleep=time.sleep,
    ) -> str:
        """Shut the system down and confirm it: read its PowerState first (already Off: nothing
        is sent), ask for a GracefulShutdown, poll until the BMC reports Off; past `timeout_s`,
        ForceOff where `force` allows it and poll again. Raises BmcError when it is not Off."""
        system = self.system()
        state = self.power_state(system)
        if state == "Off":
            return f"{system} already off"
        self.reset(system, "GracefulShutdown")
        if self._wait_off(system, timeout_s, poll_s, clock, sleep):
            return f"{system} was {state}: graceful shutdown, confirmed Off"
        if not force:
            raise BmcError(
                f"{system} not Off {timeout_s:g} s after a graceful shutdown "
                "(lifecycle.idle.force_off is false)"
            )
        self.reset(system, "ForceOff")
        if self._wait_off(system, timeout_s, poll_s, clock, sleep):
            return f"{system} was {state}: graceful shutdown timed out, ForceOff, confirmed Off"
        raise BmcError(f"{system} not Off {timeout_s:g} s after ForceOff")

    def _wait_off(self, system: str, timeout_s: float, poll_s: float, clock, sleep) -> bool:
        deadline = clock() + timeout_s
        while True:
            if self.power_state(system) == "Off":
                return True
            if clock() >= deadline:
                return False
            sleep(poll_s)
