"""A recording fake of `ssh`, for the tests of everything that reaches a host over SSH.

No host answers SSH in the test environment, so the tests put this script first on PATH. It
appends its argv to $FAKE_SSH_LOG and then behaves like a reachable host by running the remote
command (`sh -s` with the probe on stdin) on this machine, or like an unreachable one (exit 255
with ssh's message) when $FAKE_SSH_FAIL is set. As sshd does, the remote words are joined with
spaces and handed to a shell (`sh -c`), so an argument the caller quoted for the remote shell
arrives as the one word it was, and one it forgot to quote is split as it would be there.

It reads its command line as OpenSSH's ssh does (ssh.c: BSD getopt over ssh's own option
letters up to the first word that is no option or `--`; the destination, `[user@]host`; then,
unless `--` came before it, options again), so a value a caller let into an option's place is
an option here too. With $FAKE_SSH_RUN_PROXY set, a ProxyCommand it was given is run through
`sh -c` (its %h, %p and %r expanded) as ssh would run it before connecting: the tests that show
a blueprint or telemetry value cannot become one (elsewhere a tunnel is only named in the argv).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# ssh's option letters (OpenSSH 9, ssh.c's getopt string): a letter before ':' takes a value.
OPTSTRING = "1246ab:c:e:fgi:kl:m:no:p:qstvxAB:CD:E:F:GI:J:KL:MNO:P:Q:R:S:TVw:W:XYy"
WITH_VALUE = {c for c, n in zip(OPTSTRING, OPTSTRING[1:] + " ", strict=True) if n == ":"}
FLAGS = set(OPTSTRING) - WITH_VALUE - {":"}


class Usage(Exception):
    """What ssh would refuse with its usage message (exit 255)."""


@dataclass
class Command:
    """An ssh command line as ssh reads it."""

    options: list[tuple[str, str | None]] = field(default_factory=list)
    user: str | None = None
    host: str | None = None
    port: str = "22"
    remote: list[str] = field(default_factory=list)

    def config(self, key: str) -> str | None:
        """The first `-o KEY=VALUE` (or `-o "KEY VALUE"`) for `key`, as ssh keeps the first."""
        for letter, value in self.options:
            if letter == "o" and value:
                k, _, v = value.replace("=", " ", 1).partition(" ")
                if k.lower() == key.lower():
                    return v.strip()
        return None


def parse(args: list[str]) -> Command:
    out = Command()
    i, terminated, ports, users = 0, False, [], []
    while True:
        while i < len(args):
            word = args[i]
            if word == "--":
                i, terminated = i + 1, True
                break
            if not word.startswith("-") or word == "-":
                break
            j = 1
            while j < len(word):
                letter = word[j]
                if letter in WITH_VALUE:
                    if j + 1 < len(word):
                        value = word[j + 1 :]
                    elif i + 1 < len(args):
                        i += 1
                        value = args[i]
                    else:
                        raise Usage(f"option requires an argument -- {letter}")
                    out.options.append((letter, value))
                    if letter == "p":
                        ports.append(value)
                    if letter == "l":
                        users.append(value)
                    break
                if letter not in FLAGS:
                    raise Usage(f"unknown option -- {letter}")
                out.options.append((letter, None))
                j += 1
            i += 1
        if out.host is None and i < len(args):
            user, at, host = args[i].rpartition("@")
            out.host = host if at else args[i]
            if at:
                users.append(user)
            i += 1
            if i < len(args) and not terminated:
                continue  # ssh.c: options again after the destination
        break
    if out.host is None:
        raise Usage("no destination")
    out.user = users[0] if users else None
    out.port = ports[0] if ports else "22"
    out.remote = args[i:]
    return out


def _proxy(cmd: Command) -> None:
    proxy = cmd.config("ProxyCommand")
    if not proxy or proxy.lower() == "none":
        return
    tokens = {"%h": cmd.host or "", "%p": cmd.port, "%r": cmd.user or "", "%%": "%"}
    for token, value in tokens.items():
        proxy = proxy.replace(token, value)
    subprocess.run(["sh", "-c", f"exec {proxy}"], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, timeout=30, check=False)  # fmt: skip


def main(args: list[str]) -> int:
    with open(os.environ["FAKE_SSH_LOG"], "a") as f:
        f.write(json.dumps(args) + "\n")
    try:
        cmd = parse(args)
    except Usage as exc:
        print(f"ssh: {exc}\nusage: ssh [-46AaCfGgKkMNnqsTtVvXxYy] destination [command]",
              file=sys.stderr)  # fmt: skip
        return 255
    if os.environ.get("FAKE_SSH_RUN_PROXY"):
        _proxy(cmd)
    if os.environ.get("FAKE_SSH_FAIL"):
        print("ssh: connect to host 10.0.0.1 port 22: Connection refused", file=sys.stderr)
        return 255
    return subprocess.run(["sh", "-c", " ".join(cmd.remote)]).returncode


SCRIPT = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
import fake_ssh
sys.exit(fake_ssh.main(sys.argv[1:]))
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


def calls(log: Path) -> list[Command]:
    """Every ssh command line the log holds, as ssh read it."""
    return [parse(json.loads(line)) for line in log.read_text().splitlines()]
