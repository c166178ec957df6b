"""Where a host's commands run: a shell script on the host over SSH (in production), or on this
machine (the tests, with a local Slurm). One seam, so every caller (the queue read, the drain,
the job records) is tested on the real commands and only the hop differs.

A script goes to `sh -s` on stdin with its arguments after `--`: nothing of the caller's
values is ever parsed as shell code, on either side (over SSH each argument is quoted once for
the remote login shell, which is what makes it one word again there). Nor as one of ssh's
options: every ssh command line rackform runs is `ssh_argv`'s, the user after `-l` and the host
after `--` (a user `-oProxyCommand=...` is a login name ssh looks for, never a command it runs)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from rackform.plan.model import HostPlan, Plan

CONNECT_TIMEOUT_S = 15
# ssh's own exit status when it could not connect or log in (the script's are below 255).
SSH_FAILED = 255


class RemoteError(Exception):
    """No answer from the host: the script could not be run (no ssh client, the host not
    reached, timed out), or (subclasses) what ran there failed or answered garbage. One line."""


@dataclass(frozen=True)
class Done:
    rc: int
    stdout: str
    stderr: str

    def why(self) -> str:
        """The last line of stderr (or stdout), else the exit status: what a report shows."""
        lines = self.stderr.strip().splitlines() or self.stdout.strip().splitlines()
        return lines[-1].strip() if lines else f"exited {self.rc}"


class Runner(Protocol):
    where: str  # for messages: `root@10.0.0.1:22`, `this machine`

    def __call__(self, script: str, args: Sequence[str] = (), timeout: float = 60) -> Done:
        """Run `script` with `args` as $1...; RemoteError when it could not run at all."""
        ...

    def hold(self, script: str, args: Sequence[str] = ()) -> subprocess.Popen:
        """Start `script` (bash) with `args` and leave it running, its stdin, stdout and
        stderr pipes (text); RemoteError when it cannot start."""
        ...


def _run(argv: list[str], script: str, timeout: float, where: str, env=None) -> Done:
    try:
        done = subprocess.run(
            argv, input=script, capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        raise RemoteError(f"{where} did not finish in {timeout:g} s") from None
    except OSError as exc:
        raise RemoteError(f"cannot run {argv[0]}: {exc.strerror}") from None
    return Done(done.returncode, done.stdout, done.stderr)


def _popen(argv: list[str], env) -> subprocess.Popen:
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,  # a ^C to the caller reaches it through its own release
        )
    except OSError as exc:
        raise RemoteError(f"cannot run {argv[0]}: {exc.strerror}") from None


def ssh_argv(
    user: str, address: str, port: int, options: Sequence[str] = (), remote: Sequence[str] = ()
) -> list[str]:
    """ssh's command line to `address`:`port` as `user`, `options` (-o, -i ...) first and the
    user and host where ssh reads no option: after `-l` and after `--` (after which ssh parses
    nothing more, so the remote words are never options either). `remote`: the words the host's
    login shell gets, joined with spaces: each one already quoted for that shell by the caller.
    Whatever the blueprint's schema or a stack's outputs let through, nothing here is read as an
    option (the schema refuses such names too: `schema.names`)."""
    return ["ssh", *options, "-p", str(port), "-l", user, "--", address, *remote]


@dataclass(frozen=True)
class Ssh:
    """A host reached as `user@address:port` with keys or an agent (BatchMode: never a password
    prompt that would hang a cron job); `identity` and `known_hosts`: the key and known_hosts
    file a command was given (its --private-key and --known-hosts), else ssh's own."""

    user: str
    address: str
    port: int = 22
    identity: str | None = None
    known_hosts: str | None = None
    # A command whose stdin and stdout are the connection (ssh_config(5) ProxyCommand), for a
    # host reached through a tunnel (an EC2 Instance Connect Endpoint on AWS).
    proxy: str | None = None

    @property
    def where(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"

    def argv(
        self, args: Sequence[str] = (), command: Sequence[str] = ("sh", "-s", "--")
    ) -> list[str]:
        """ssh's command line running `command` then `args` on the host, each word quoted
        once for the remote login shell."""
        options = [
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
            *(["-i", self.identity, "-o", "IdentitiesOnly=yes"] if self.identity else []),
            # Quoted: ssh reads this option's value as a list of files split on spaces.
            *(["-o", f'UserKnownHostsFile="{self.known_hosts}"'] if self.known_hosts else []),
            *(["-o", f"ProxyCommand={self.proxy}"] if self.proxy else []),
        ]  # fmt: skip
        remote = [*command[:1], *(shlex.quote(a) for a in [*command[1:], *args])]
        return ssh_argv(self.user, self.address, self.port, options, remote)

    def hold(self, script: str, args: Sequence[str] = ()) -> subprocess.Popen:
        """`script` under bash on the host, left running with its input, output and errors
        as pipes (a lease's heartbeat in, its answer out); ssh gives up on a host silent for
        30 s."""
        ssh = shutil.which("ssh")
        if ssh is None:
            raise RemoteError("no `ssh` client on PATH; install openssh-client")
        alive = ["-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3"]
        argv = self.argv(args, ("bash", "-c", script, "bash"))
        return _popen([ssh, *alive, *argv[1:]], None)

    def __call__(self, script: str, args: Sequence[str] = (), timeout: float = 60) -> Done:
        ssh = shutil.which("ssh")
        if ssh is None:
            raise RemoteError("no `ssh` client on PATH; install openssh-client")
        done = _run([ssh, *self.argv(args)[1:]], script, timeout, self.where)
        if done.rc == SSH_FAILED:
            raise RemoteError(f"{self.where} is not reachable over SSH: {done.why()}")
        return done


@dataclass(frozen=True)
class Local:
    """This machine, with its own environment (e.g. SLURM_CONF for a local Slurm)."""

    env: Mapping[str, str] | None = None
    where: str = "this machine"

    def __call__(self, script: str, args: Sequence[str] = (), timeout: float = 60) -> Done:
        env = None if self.env is None else dict(self.env)
        return _run(["sh", "-s", "--", *args], script, timeout, self.where, env)

    def hold(self, script: str, args: Sequence[str] = ()) -> subprocess.Popen:
        env = None if self.env is None else dict(self.env)
        return _popen(["bash", "-c", script, "bash", *args], env)


def host(plan: Plan, name: str) -> HostPlan | None:
    """A listed host of the plan by name (every node group, with or without GPUs)."""
    return next((h for g in plan.node_groups for h in g.hosts if h.name == name), None)


def ssh_to(plan: Plan, h: HostPlan, identity=None, known_hosts=None) -> Ssh:
    return Ssh(
        plan.ssh_user,
        h.address,
        h.port,
        None if identity is None else str(identity),
        None if known_hosts is None else str(known_hosts),
    )


def controller(plan: Plan, identity=None, known_hosts=None) -> Runner:
    """The scheduler's controller among the listed hosts, over SSH as the plan's user (with the
    key and known_hosts file given, if any). A target whose stack creates the controller
    reaches it its own way (its runtime's `reach`: `runtimes.controller`)."""
    if plan.scheduler is None:
        raise RemoteError(f"cluster {plan.name} declares no scheduler")
    h = host(plan, plan.scheduler.controller)
    if h is None:
        raise RemoteError(
            f"the scheduler's controller {plan.scheduler.controller!r} is not a listed host"
        )
    return ssh_to(plan, h, identity, known_hosts)
