"""A recording fake of `ssh`, for the host provider tests.

No host answers SSH in the test environment, so the tests put this script first on PATH. It
appends its argv to $FAKE_SSH_LOG and then behaves like a reachable host by running the remote
command (`sh -s` with the probe on stdin) on this machine, or like an unreachable one (exit 255
with ssh's message) when $FAKE_SSH_FAIL is set. As sshd does, the remote words are joined with
spaces and handed to a shell (`sh -c`), so an argument the caller quoted for the remote shell
arrives as the one word it was, and one it forgot to quote is split as it would be there.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

SCRIPT = r"""
import json, os, subprocess, sys

with open(os.environ["FAKE_SSH_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
if os.environ.get("FAKE_SSH_FAIL"):
    print("ssh: connect to host 10.0.0.1 port 22: Connection refused", file=sys.stderr)
    sys.exit(255)
args = sys.argv[1:]
i = 0
while i < len(args) and args[i].startswith("-"):
    i += 2  # every option the provider passes takes a value (-o X, -p N)
remote = " ".join(args[i + 1:])  # after user@host, as sshd gets it
sys.exit(subprocess.run(["sh", "-c", remote]).returncode)
"""


def install(bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "ssh"
    exe.write_text(f"#!{sys.executable}\n{SCRIPT}", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def environ(tmp: Path, base: dict[str, str], fail: bool = False) -> dict[str, str]:
    """`base` with this fake first on PATH (installed under tmp/bin), its argv log at
    tmp/ssh.log, and with `fail` every host unreachable."""
    install(tmp / "bin")
    env = {**base, "PATH": f"{tmp / 'bin'}{os.pathsep}{base['PATH']}"}
    env["FAKE_SSH_LOG"] = str(tmp / "ssh.log")
    if fail:
        env["FAKE_SSH_FAIL"] = "1"
    return env
