"""SSH into testbed VMs from the host: the testbed's own key and known_hosts file, loopback only."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Ssh:
    port: int
    key: Path
    known_hosts: Path
    user: str = "root"
    host: str = "127.0.0.1"

    def options(self) -> list[str]:
        return [
            "-i", str(self.key),
            "-p", str(self.port),
            "-o", "BatchMode=yes",
            "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts}",
            # Host keys are made on the VM's first boot; the first connection records them in
            # the testbed's own known_hosts, later ones must match.
            "-o", "StrictHostKeyChecking=accept-new",
            "-o", "ConnectTimeout=5",
            "-o", "LogLevel=ERROR",
        ]  # fmt: skip

    def run(
        self, command: str, *, check: bool = True, timeout: float = 300, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        # ssh sets the stdin it is given to non-blocking; never hand it the caller's.
        stdin = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
        proc = subprocess.run(
            ["ssh", *self.options(), f"{self.user}@{self.host}", command],
            capture_output=True,
            text=True,
            timeout=timeout,
            **stdin,
        )
        if check and proc.returncode != 0:
            raise SshError(
                f"ssh {self.host}:{self.port} {command!r} exited {proc.returncode}: "
                f"{proc.stderr.strip() or proc.stdout.strip()}"
            )
        return proc

    def answers(self) -> bool:
        try:
            return self.run("true", check=False, timeout=20).returncode == 0
        except subprocess.TimeoutExpired:
            return False


class SshError(RuntimeError):
    pass


def wait_all(conns: dict[str, Ssh], timeout_s: float, alive=None) -> dict[str, float]:
    """Wait until every VM answers SSH; return seconds each took. `alive(name)` is asked while
    waiting so a VM whose QEMU died fails at once instead of at the timeout."""
    start = time.monotonic()
    ready: dict[str, float] = {}
    while len(ready) < len(conns):
        for name, ssh in conns.items():
            if name in ready:
                continue
            if alive is not None and not alive(name):
                raise SshError(f"{name}: QEMU exited while booting (see its console.log)")
            if ssh.answers():
                ready[name] = time.monotonic() - start
        if len(ready) < len(conns):
            if time.monotonic() - start > timeout_s:
                late = sorted(set(conns) - set(ready))
                raise SshError(
                    f"{', '.join(late)}: SSH did not answer within {timeout_s:.0f} s "
                    "(see console.log in the VM's directory)"
                )
            time.sleep(2)
    return ready
