"""Run the site playbook over a compiled cluster through ansible-runner: a live progress display,
a per-host summary, and the failures named by host, role and task.

`run(inventory, group_vars, ...)` is what `rackform configure` calls and `configure(inventory=,
group_vars=)` is the same run behind the Pulumi configure resource's contract. Both take the
inventory and variables the compiled plan carries (`Plan.inventory`, `Plan.group_vars`).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackform.catalog.preflight import load_preflight_figures
from rackform.paths import collections_root, site
from rackform.plan.configuring import fork_width, tunnelled

ROLES = (
    "nvidia_driver",
    "nccl_rdma",
    "nvme_raid",
    "dcgm",
    "shared_storage",
    "slurm",
    "smoke_train",
)


@dataclass
class HostSummary:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0


@dataclass(frozen=True)
class Failure:
    host: str
    role: str
    task: str
    message: str

    def __str__(self) -> str:
        where = f"{self.role} : {self.task}" if self.role else self.task
        return f"{self.host}: {where}: {self.message}"


@dataclass
class RunResult:
    rc: int
    status: str
    hosts: dict[str, HostSummary] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    changed_tasks: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0
    artifacts: Path | None = None

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())


# An EC2 Instance Connect Endpoint "can support up to 20 concurrent connections", and cuts an
# established TCP connection after 1 hour (EC2 user guide, "Connect using EC2 Instance Connect
# Endpoint to a Linux instance", limitations). Each ssh through it opens one tunnel (its
# ProxyCommand), so runs through one open at most 20 connections at once (the forks:
# `forks`, the catalog's `configure.tunnel_connections`)...
# ...and no connection outlives its task: Ansible's default ssh_args (`-o ControlMaster=auto
# -o ControlPersist=60s`) keep each host's master connection, and with it its tunnel, open for
# 60 s after its last task, so a cluster of more than 20 nodes holds more than 20 tunnels while
# the forks move on to the next hosts, and one master carries a host's whole converge, which the
# endpoint cuts at the hour. Without connection sharing (ssh_config(5): `ControlPath none`) each
# task's ssh is its own tunnel, closed when the task's command returns: at most one per fork,
# and only a single task longer than the hour is cut (the long package installs are async and
# polled, each poll a new connection). ServerAlive notices a cut connection within two minutes
# instead of waiting on TCP.
TUNNEL_SSH_ARGS = (
    "-C -o ControlMaster=no -o ControlPath=none -o ServerAliveInterval=30 -o ServerAliveCountMax=4"
)


def with_access(
    inv: dict[str, Any],
    variables: Mapping[str, Any],
    *,
    private_key: Path | None = None,
    known_hosts: Path | None = None,
) -> dict[str, Any]:
    """A copy of the compiled inventory with the role variables as the `all` group's variables
    (host variables, such as a host's own NVMe drives, still win), the SSH key and known_hosts
    file when given (then only the hosts' keys in it are trusted: StrictHostKeyChecking=yes),
    and the inventory's SSH tunnel (`rackform_ssh_proxy`) as ssh's ProxyCommand, with one
    connection per task (TUNNEL_SSH_ARGS)."""
    inv = copy.deepcopy(inv)
    all_vars = inv.setdefault("all", {}).setdefault("vars", {})
    all_vars.update(variables)
    if private_key is not None:
        all_vars["ansible_ssh_private_key_file"] = str(private_key)
    args = []
    if known_hosts is not None:
        args += [f"-o UserKnownHostsFile={known_hosts}", "-o StrictHostKeyChecking=yes"]
    if all_vars.get("rackform_ssh_proxy"):
        args.append("-o ProxyCommand='{{ rackform_ssh_proxy }}'")
        all_vars["ansible_ssh_args"] = TUNNEL_SSH_ARGS
    if args:
        all_vars["ansible_ssh_common_args"] = " ".join(args)
    return inv


@contextmanager
def access_files(access: Mapping[str, str] | None) -> Iterator[dict[str, Path]]:
    """The stack's access ({"private_key", "known_hosts"}) as files for ssh, readable by this
    user only and removed afterwards; nothing when there is none."""
    if not access:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="rackform-access-") as d:
        key, hosts = Path(d) / "id_ed25519", Path(d) / "known_hosts"
        key.touch(mode=0o600)
        key.write_text(access["private_key"], encoding="utf-8")
        hosts.write_text(access["known_hosts"], encoding="utf-8")
        yield {"private_key": key, "known_hosts": hosts}


def _message(res: Mapping[str, Any], max_lines: int = 6) -> str:
    """A failed task's message: Ansible's msg, then the last lines of the command's output."""
    lines = [str(res.get("msg") or "").strip()]
    for key in ("stderr", "stdout", "module_stderr"):
        text = str(res.get(key) or "").strip()
        if text and text not in lines[0]:
            lines.append(f"{key}: " + " / ".join(text.splitlines()[-3:]))
    text = "\n".join(line for line in lines if line) or "failed without a message"
    out = text.splitlines()
    if len(out) > max_lines:  # a module that returns a whole log in msg (pip) keeps its tail
        out = [out[0], "...", *out[-(max_lines - 2) :]]
    return " / ".join(out)


def diff_lines(diff: Any) -> list[str]:
    """A task's --diff result (one or a list of before/after pairs) as unified diff lines."""
    out: list[str] = []
    for d in diff if isinstance(diff, list) else [diff] if diff else []:
        if not isinstance(d, Mapping):
            continue
        if "prepared" in d:  # modules that format their own diff (apt, ...)
            out += str(d["prepared"]).splitlines()
            continue
        before, after = d.get("before", ""), d.get("after", "")
        if not isinstance(before, str) or not isinstance(after, str):
            before, after = json.dumps(before, indent=1), json.dumps(after, indent=1)
        out += [
            line.rstrip("\n")
            for line in difflib.unified_diff(
                before.splitlines(keepends=True),
                after.splitlines(keepends=True),
                fromfile=str(d.get("before_header", "before")),
                tofile=str(d.get("after_header", "after")),
            )
        ]
    return out


class _Progress:
    """Turns runner events into a live display: one line as each task starts, then one line
    per host that changed or failed (hosts that were merely ok or skipped are only counted),
    and the message of every debug task, which is how the roles explain a skip."""

    def __init__(self, out: Callable[[str], None]):
        self.out = out
        self.failures: list[Failure] = []
        self.changed: dict[str, list[str]] = {}  # host -> "role : task" that changed

    def __call__(self, event: Mapping[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {}) or {}
        if kind == "playbook_on_play_start":
            self.out(f"== {data.get('play', '')}")
        elif kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            role = data.get("role", "")
            task = data.get("task", "")
            quiet = data.get("task_action", "").split(".")[-1] == "meta" or task.startswith(
                "Validating arguments against arg spec"
            )
            if not quiet:
                handler = "handler " if kind == "playbook_on_handler_task_start" else ""
                self.out(f"{handler}{role + ' : ' if role else ''}{task}")
        elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
            self._result(kind, data)
        return True

    def _result(self, kind: str, data: Mapping[str, Any]) -> None:
        res = data.get("res", {}) or {}
        host, role, task = data.get("host", "?"), data.get("role", ""), data.get("task", "")
        took = data.get("duration")
        took = f" ({took:.1f} s)" if isinstance(took, int | float) else ""
        if kind == "runner_on_ok":
            if data.get("task_action", "").endswith("debug") and "msg" in res:
                self.out(f"    {host}: {res['msg']}")
            elif res.get("changed"):
                self.changed.setdefault(host, []).append(f"{role} : {task}" if role else task)
                self.out(f"    {host}: changed{took}")
                for line in diff_lines(res.get("diff")):
                    self.out(f"      {line}")
            return
        failure = Failure(host, role, task, _message(res))
        self.failures.append(failure)
        what = "FAILED" if kind == "runner_on_failed" else "UNREACHABLE"
        self.out(f"    {host}: {what}{took}: {failure.message}")


def _ansible_playbook() -> Path:
    beside = Path(sys.executable).with_name("ansible-playbook")
    found = str(beside) if beside.exists() else shutil.which("ansible-playbook")
    if not found:
        raise FileNotFoundError(
            "ansible-playbook is not installed (pip install 'rackform[deploy]')"
        )
    return Path(found)


def forks(nodes: int, tunnelled: bool, available_mib: int | None = -1) -> tuple[int, str]:
    """How many nodes Ansible works on at once, and why not every one where it is fewer: every
    node (the smoke job's rendezvous needs all of them running; it runs detached, so fewer
    forks still start every node), bounded as `rackform plan` says it will be
    (rackform/plan/configuring.py `fork_width`, the catalog's figures), with the controller's
    memory read now (`available_mib`: from /proc/meminfo when -1; None: unknown, not capped)."""
    mib = available_memory_mib() if available_mib == -1 else available_mib
    return fork_width(nodes, tunnelled, mib, load_preflight_figures().configure)


def available_memory_mib(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable (the kernel's estimate of what can be allocated without swapping), or None
    where there is no such file (not Linux)."""
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def run_playbook(
    inv: dict[str, Any],
    *,
    extravars: Mapping[str, Any] | None = None,
    limit: str | None = None,
    tags: Sequence[str] = (),
    check: bool = False,
    diff: bool = False,
    playbook: Path | None = None,
    out: Callable[[str], None] = print,
    keep_artifacts: Path | None = None,
    timeout_s: int | None = None,
) -> RunResult:
    """Run `playbook` (the site playbook when None) over `inv` and return what happened;
    `timeout_s`: ansible-runner ends the run past it (status `timeout`).
    Artifacts (ansible-runner's event log) stay in `keep_artifacts` when given, else in a temporary directory kept on failure."""
    import ansible_runner  # deploy extra; imported here so `rackform validate` never needs it

    work = keep_artifacts or Path(tempfile.mkdtemp(prefix="rackform-configure-"))
    work.mkdir(parents=True, exist_ok=True)
    cmdline = []
    if check:
        cmdline.append("--check")
    if diff:
        cmdline.append("--diff")
    nodes = sum(len(g["hosts"]) for g in inv["all"]["children"]["gpu_nodes"]["children"].values())
    progress = _Progress(out)
    width, why = forks(nodes, tunnelled(inv))
    if why:
        out(f"configuring {nodes} nodes {width} at a time ({why})")
    start = time.monotonic()
    runner = ansible_runner.run(
        private_data_dir=str(work),
        playbook=str(playbook or site()),
        inventory=inv,
        extravars=dict(extravars or {}),
        limit=limit,
        tags=",".join(tags) or None,
        cmdline=" ".join(cmdline) or None,
        forks=width,
        envvars={
            # ansible-runner starts `ansible-playbook` by name: the one beside this Python.
            "PATH": os.pathsep.join([str(_ansible_playbook().parent), os.environ.get("PATH", "")]),
            # ansible-runner turns host key checking off unless told; keep Ansible's default.
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            # The rackform.gpu collection this package ships (the roles, their modules, the
            # site playbook); ansible.posix and community.general come from the `ansible`
            # package beside it (Ansible also scans sys.path for collections).
            "ANSIBLE_COLLECTIONS_PATH": str(collections_root()),
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_DEPRECATION_WARNINGS": "False",
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "ANSIBLE_NOCOLOR": "True",
            "ANSIBLE_SSH_RETRIES": "3",
        },
        quiet=True,
        event_handler=progress,
        timeout=timeout_s,
    )
    result = RunResult(
        rc=runner.rc,
        status=runner.status,
        failures=progress.failures,
        changed_tasks=progress.changed,
        seconds=time.monotonic() - start,
        artifacts=work,
    )
    stats = runner.stats or {}
    for key, attr in (
        ("ok", "ok"),
        ("changed", "changed"),
        ("failures", "failed"),
        ("dark", "unreachable"),
        ("skipped", "skipped"),
        ("rescued", "rescued"),
    ):
        for host, n in (stats.get(key) or {}).items():
            setattr(result.hosts.setdefault(host, HostSummary()), attr, n)
    if runner.rc == 0 and keep_artifacts is None:
        shutil.rmtree(work, ignore_errors=True)
        result.artifacts = None
    return result


def summary_lines(result: RunResult) -> list[str]:
    """The per-host table printed after a run (ok counts include changed, as in Ansible)."""
    head = f"{'host':<14}{'ok':>5}{'changed':>9}{'failed':>8}{'unreachable':>13}{'skipped':>9}"
    lines = [head]
    for host, s in sorted(result.hosts.items()):
        lines.append(
            f"{host:<14}{s.ok:>5}{s.changed:>9}{s.failed:>8}{s.unreachable:>13}{s.skipped:>9}"
        )
    return lines


def run(
    inventory: dict[str, Any],
    group_vars: Mapping[str, Any],
    *,
    private_key: Path | None = None,
    known_hosts: Path | None = None,
    extravars: Mapping[str, Any] | None = None,
    limit: str | None = None,
    roles: Sequence[str] = (),
    check: bool = False,
    diff: bool = False,
    report_dir: Path | None = None,
    out: Callable[[str], None] = print,
    keep_artifacts: Path | None = None,
    playbook: Path | None = None,
    timeout_s: int | None = None,
) -> RunResult:
    """Converge the nodes of `inventory` with every role (or only `roles`) and the role
    variables `group_vars`; what happened, without raising on a failed host."""
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise ValueError(f"unknown role(s) {', '.join(unknown)}; roles are {', '.join(ROLES)}")
    inv = with_access(inventory, group_vars, private_key=private_key, known_hosts=known_hosts)
    extra = dict(extravars or {})
    if report_dir is not None:
        extra.setdefault("smoke_train_fetch_dir", str(report_dir.resolve()))
        extra.setdefault("dcgm_prometheus_file", str(report_dir.resolve() / "prometheus-dcgm.yml"))
    return run_playbook(
        inv,
        extravars=extra,
        limit=limit,
        tags=roles,
        check=check,
        diff=diff,
        playbook=playbook,
        out=out,
        keep_artifacts=keep_artifacts,
        timeout_s=timeout_s,
    )


class ConfigureFailed(RuntimeError):
    """Ansible failed on some host; the message names each host, role and task."""

    def __init__(self, result: RunResult):
        self.result = result
        lines = [str(f) for f in result.failures] or [
            f"ansible-playbook exited {result.rc} ({result.status})"
        ]
        super().__init__("configure failed: " + "; ".join(lines))


def summary(result: RunResult) -> dict[str, Any]:
    """JSON-friendly summary of a run (what the Pulumi configure resource records)."""
    return {
        "rc": result.rc,
        "seconds": round(result.seconds, 1),
        "changed": result.changed,
        "hosts": {h: dataclasses.asdict(s) for h, s in sorted(result.hosts.items())},
    }


def configure(
    *,
    inventory: dict[str, Any],
    group_vars: dict[str, Any],
    access: Mapping[str, str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The contract the Pulumi configure resource calls (see rackform/stack/stages.py):
    JSON in, a summary out, ConfigureFailed when any host failed. `options` are `run`'s."""
    options.setdefault("out", lambda line: print(line, file=sys.stderr))
    with access_files(access) as files:
        result = run(inventory, group_vars, **files, **options)
    if result.rc != 0:
        raise ConfigureFailed(result)
    return summary(result)


def drift(
    *,
    inventory: dict[str, Any],
    group_vars: dict[str, Any],
    access: Mapping[str, str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """What a converge would change, host by host: the roles in check mode (the Pulumi
    configure resource's `read`, which `pulumi refresh` calls). A host that could not be
    checked is drift too: nobody knows what it holds."""
    options.setdefault("out", lambda line: print(line, file=sys.stderr))
    with access_files(access) as files:
        result = run(inventory, group_vars, check=True, **files, **options)
    hosts = {h: list(t) for h, t in result.changed_tasks.items()}
    for f in result.failures:
        hosts.setdefault(f.host, []).append(f"{f.role} : {f.task}: not checked: {f.message}")
    return {"hosts": hosts, "rc": result.rc}
