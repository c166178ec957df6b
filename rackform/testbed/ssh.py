"""SSH into testbed VMs from the host: the testbed's own key and known_hosts file, loopback only."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rackform.scheduler.remote import ssh_argv


@dataclass(frozen=True)
class Ssh:
    port: int
    key: Path
    known_hosts: Path
    user: str = "root"
    host: str = "127.0.0.1"

    def options(self) -> list[str]:
        """ssh's options before the user, port and host (which `ssh_argv` places)."""
        return [
            "-i", str(self.key),
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
            ssh_argv(self.user, self.host, self.port, self.options(), (command,)),
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


def wait_all(
    conns: dict[str, Ssh],
    timeout_s: float,
    alive: Callable[[str], object] | None = None,
    ready: Callable[[str, Ssh], bool] | None = None,
    waiting_for: str = "SSH did not answer",
) -> dict[str, float]:
    """Wait until every VM is ready (by default: answers SSH); return seconds each took. Every
    VM still pending is probed at once, so a slow one does not delay noticing the others.
    `alive(name)` is asked while waiting so a VM whose QEMU died fails at once instead of at
    the timeout."""
    is_ready = ready or (lambda _name, ssh: ssh.answers())
    start = time.monotonic()
    took: dict[str, float] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(conns))) as pool:
        while len(took) < len(conns):
            pending = [n for n in conns if n not in took]
            for name in pending:
                if alive is not None and not alive(name):
                    raise SshError(f"{name}: QEMU exited while booting (see its console.log)")
            answers = list(pool.map(lambda n: is_ready(n, conns[n]), pending))
            for name, ok in zip(pending, answers, strict=True):
                if ok:
                    took[name] = time.monotonic() - start
            if len(took) < len(conns):
                if time.monotonic() - start > timeout_s:
                    late = sorted(set(conns) - set(took))
                    raise SshError(
                        f"{', '.join(late)}: {waiting_for} within {timeout_s:.0f} s "
                        "(see console.log in the VM's directory)"
                    )
                time.sleep(1)
    return took
