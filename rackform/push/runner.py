"""Run the site playbook over a compiled cluster through ansible-runner: a live progress display,
a per-host summary, and the failures named by host, role and task.

`run(inventory, group_vars, ...)` is what `rackform configure` calls and `configure(inventory=,
group_vars=)` is the same run behind the Pulumi configure resource's contract. Both take the
inventory and variables the compiled plan carries (`Plan.inventory`, `Plan.group_vars`).

At scale (collection/playbooks/site.yml says what each play does with these): the GPU roles go
through the nodes in batches (`batch`: the fork width where the cluster is wider than it, else
one batch), the run stops before a batch where more than `max_fail_percent` of the one before
failed, the facts gathered once are kept for the whole run in its own fact cache (no expiry),
and the nodes that came back UNREACHABLE are tried again (`retries`, limited to them, after a
wait); where that brought every one back, the cluster-wide plays run once more over every node.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
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
from rackform.push import strategy

ROLES = (
    "nvidia_driver",
    "nccl_rdma",
    "nvme_raid",
    "dcgm",
    "shared_storage",
    "slurm",
    "smoke_train",
)
# The roles with a play tagged CLUSTER_TAG in site.yml: what they write spans every node (the
# scrape config, slurm.conf, the smoke job), so it is written only in a run that has them all.
CLUSTER_ROLES = ("dcgm", "slurm", "smoke_train")
CLUSTER_TAG = "rackform_cluster"
# The GPU roles' play stops before a batch where more than this share of the batch before it
# failed or was unreachable (site.yml's `rackform_max_fail_percent`, whose default is this one).
MAX_FAIL_PERCENT = 25
# A node that came back UNREACHABLE (about 3% of 2,000 hosts on any run, in the field) is
# tried again this many times, RETRY_WAIT_S apart.
UNREACHABLE_RETRIES = 2
RETRY_WAIT_S = 30
# site.yml's check before each batch: a host that fails it was never started.
BATCH_CHECK = "Go on only where the batch before this one converged (rackform_max_fail_percent)"


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
    unreachable: bool = False

    def __str__(self) -> str:
        where = f"{self.role} : {self.task}" if self.role else self.task
        lost = "UNREACHABLE at " if self.unreachable else ""
        return f"{self.host}: {lost}{where}: {self.message}"


@dataclass
class RunResult:
    rc: int
    status: str
    hosts: dict[str, HostSummary] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    changed_tasks: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0
    artifacts: Path | None = None
    retries: int = 0  # the passes that tried unreachable nodes again
    stopped: bool = False  # a batch was not started (more than max_fail_percent failed before it)
    not_reached: list[str] = field(default_factory=list)  # never started: the run stopped first

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())

    @property
    def unreachable(self) -> list[str]:
        """The nodes unreachable at the end of the run (after their retries)."""
        return sorted({f.host for f in self.failures if f.unreachable})

    @property
    def failed(self) -> list[str]:
        """The nodes that failed a task (unreachable ones aside)."""
        return sorted({f.host for f in self.failures if not f.unreachable})


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
    and the message of every debug task, which is how the roles explain a skip. Each host's
    line follows its own task's line: where nodes go at their own pace (`strategy: free`), a
    result for another task than the last line named names its task again first (what
    `rackform drift`'s reader, rackform/gitops/hostdrift.py, attributes it by)."""

    def __init__(self, out: Callable[[str], None]):
        self.out = out
        self.failures: list[Failure] = []
        self.changed: dict[str, list[str]] = {}  # host -> "role : task" that changed
        self.plays: dict[str, int] = {}  # a play in batches starts once a batch
        self.started: set[str] = set()  # under `strategy: free` each host starts each task
        self.last = ""  # the task the last task line named
        self.play = ""
        self.seen: dict[str, set[str]] = {}  # play -> the hosts that ran a task of it
        self.held_in = ""  # the play whose batch check stopped the run

    def __call__(self, event: Mapping[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {}) or {}
        if kind == "playbook_on_play_start":
            play = self.play = data.get("play", "")
            self.plays[play] = self.plays.get(play, 0) + 1
            n = self.plays[play]
            self.started.clear()
            self.last = ""
            self.out(f"== {play}" + (f" (batch {n})" if n > 1 else ""))
        elif kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            role = data.get("role", "")
            task = data.get("task", "")
            uuid = data.get("task_uuid")
            if uuid and uuid in self.started:
                return True
            self.started.add(uuid or "")
            quiet = data.get("task_action", "").split(".")[-1] == "meta" or task.startswith(
                "Validating arguments against arg spec"
            )
            if not quiet:
                handler = "handler " if kind == "playbook_on_handler_task_start" else ""
                self._task(f"{handler}{role + ' : ' if role else ''}{task}")
        elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
            self._result(kind, data)
        return True

    def _task(self, line: str) -> None:
        self.last = line.removeprefix("handler ")
        self.out(line)

    def _result(self, kind: str, data: Mapping[str, Any]) -> None:
        res = data.get("res", {}) or {}
        host, role, task = data.get("host", "?"), data.get("role", ""), data.get("task", "")
        self.seen.setdefault(self.play, set()).add(host)
        took = data.get("duration")
        took = f" ({took:.1f} s)" if isinstance(took, int | float) else ""
        label = f"{role} : {task}" if role else task
        shown = (
            kind != "runner_on_ok"
            or res.get("changed")
            or (data.get("task_action", "").endswith("debug") and "msg" in res)
        )
        if shown and label != self.last:
            self._task(label)
        if kind == "runner_on_ok":
            if data.get("task_action", "").endswith("debug") and "msg" in res:
                self.out(f"    {host}: {res['msg']}")
            elif res.get("changed"):
                self.changed.setdefault(host, []).append(label)
                self.out(f"    {host}: changed{took}")
                for line in diff_lines(res.get("diff")):
                    self.out(f"      {line}")
            return
        if task == BATCH_CHECK:
            self.held_in = self.play
        lost = kind == "runner_on_unreachable"
        failure = Failure(host, role, task, _message(res), unreachable=lost)
        self.failures.append(failure)
        what = "UNREACHABLE" if lost else "FAILED"
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
    skip_tags: Sequence[str] = (),
    check: bool = False,
    diff: bool = False,
    playbook: Path | None = None,
    out: Callable[[str], None] = print,
    keep_artifacts: Path | None = None,
    timeout_s: int | None = None,
    batch: int | None = None,
    max_fail_percent: int = MAX_FAIL_PERCENT,
    fact_cache: Path | None = None,
    announce: bool = True,
) -> RunResult:
    """One run of `playbook` (the site playbook when None) over `inv`: what happened;
    `timeout_s`: ansible-runner ends the run past it (status `timeout`). `batch`: the nodes the
    GPU roles' play takes at a time (None: the fork width where the cluster is wider, else every
    node; 0: every node), with `max_fail_percent` (site.yml's extra variables). Facts go to
    `fact_cache` (a directory kept across the passes of one run; None: a fresh one in this run's
    directory), never expiring. Artifacts (ansible-runner's event log) stay in `keep_artifacts`
    when given, else in a temporary directory kept on failure."""
    import ansible_runner  # deploy extra; imported here so `rackform validate` never needs it

    work = keep_artifacts or Path(tempfile.mkdtemp(prefix="rackform-configure-"))
    work.mkdir(parents=True, exist_ok=True)
    if fact_cache is None:
        fact_cache = work / "fact_cache"
        shutil.rmtree(fact_cache, ignore_errors=True)
    fact_cache.mkdir(parents=True, exist_ok=True)
    cmdline = []
    if check:
        cmdline.append("--check")
    if diff:
        cmdline.append("--diff")
    nodes = len(_nodes(inv))
    progress = _Progress(out)
    width, why = forks(nodes, tunnelled(inv))
    size = batches(nodes, width, batch)
    if announce and (why or size):
        out(
            f"configuring {nodes} nodes {width} at a time"
            + (f" ({why})" if why else "")
            + (
                f", the GPU roles in batches of {size}, stopping where more than "
                f"{max_fail_percent}% of a batch fails"
                if size
                else ""
            )
        )
    extra = {"rackform_batch": size, "rackform_max_fail_percent": max_fail_percent}
    strategy_env, strategy_vars = strategy.settings(tunnelled(inv))
    start = time.monotonic()
    runner = ansible_runner.run(
        private_data_dir=str(work),
        playbook=str(playbook or site()),
        inventory=inv,
        # What the run is told wins over the caller's extra variables of the same name.
        extravars={**dict(extravars or {}), **extra, **strategy_vars},
        limit=limit,
        tags=",".join(tags) or None,
        skip_tags=",".join(skip_tags) or None,
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
            # The facts site.yml gathers once, for every host, are never expired (Ansible's
            # default is a day): a cache that expires mid-run leaves a late batch, or a later
            # pass, without the facts of the hosts outside it.
            "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "0",
            **strategy_env,
        },
        # ...and kept in the one directory every pass of the run reads (ansible-runner's own
        # is one per ansible-playbook run; an absolute path is taken as it is).
        fact_cache_type="jsonfile",
        fact_cache=str(fact_cache.resolve()),
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
        stopped=bool(progress.held_in),
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
    if result.stopped:  # the batches after the one that was held never started
        done = progress.seen[progress.held_in] | {f.host for f in result.failures}
        result.not_reached = [h for h in _within(_nodes(inv), limit) if h not in done]
    if runner.rc == 0 and keep_artifacts is None:
        shutil.rmtree(work, ignore_errors=True)
        result.artifacts = None
    return result


def batches(nodes: int, width: int, batch: int | None) -> int:
    """How many nodes the GPU roles' play takes at a time (0: every node, one batch): `batch`
    where given, else, where the cluster is wider than the forks, as many rounds of the fork
    width as it takes, evened out (21 nodes in 20 forks: 11 and 10, not 20 and 1, since a
    batch whose every node fails ends the run), which keeps the forks busy and stops a bad
    change after the first batch."""
    if batch is not None:
        return 0 if batch >= nodes else batch
    if nodes <= width:
        return 0
    return math.ceil(nodes / math.ceil(nodes / width))


def _nodes(inv: Mapping[str, Any]) -> list[str]:
    groups = inv["all"]["children"]["gpu_nodes"]["children"]
    return [h for g in groups.values() for h in (g.get("hosts") or {})]


def _within(hosts: list[str], limit: str | None) -> list[str]:
    """The `hosts` a run limited to `limit` covers, where `limit` is none or a list of names (a
    pattern is Ansible's to read: then none are named)."""
    if limit is None:
        return hosts
    if any(c in limit for c in "*:!&~[@"):
        return []
    names = set(limit.split(","))
    return [h for h in hosts if h in names]


def summary_lines(result: RunResult) -> list[str]:
    """The per-host table printed after a run (ok counts include changed, as in Ansible)."""
    head = f"{'host':<14}{'ok':>5}{'changed':>9}{'failed':>8}{'unreachable':>13}{'skipped':>9}"
    lines = [head]
    for host, s in sorted(result.hosts.items()):
        lines.append(
            f"{host:<14}{s.ok:>5}{s.changed:>9}{s.failed:>8}{s.unreachable:>13}{s.skipped:>9}"
        )
    return lines


def report_lines(result: RunResult) -> list[str]:
    """Every node the run left unconfigured, and why: each failed node as `HOST: ROLE : TASK:
    message`, each node still unreachable after its retries, and the nodes a stopped run never
    started, each group under a line that counts it. Nothing for a run that configured every
    node."""
    lines: list[str] = []
    held = [f for f in result.failures if f.task == BATCH_CHECK]
    failed = [f for f in result.failures if not f.unreachable and f not in held]
    lost = [f for f in result.failures if f.unreachable]
    if failed:
        lines.append(f"{len({f.host for f in failed})} node(s) failed:")
        lines += [str(f) for f in failed]
    if lost:
        tried = f" after {result.retries} retr{'y' if result.retries == 1 else 'ies'}"
        lines.append(f"{len(lost)} node(s) unreachable{tried if result.retries else ''}:")
        lines += [str(f) for f in lost]
    if held:
        lines.append(
            f"{len(held)} node(s) not started: {', '.join(sorted(f.host for f in held))}: "
            f"{held[0].message} (no node got the plays after the batches)"
        )
    if result.not_reached:
        lines.append(
            f"{len(result.not_reached)} node(s) not reached, the run having stopped: "
            + ", ".join(result.not_reached)
        )
    if result.rc != 0 and not lines:
        lines.append(f"ansible-playbook exited {result.rc} ({result.status})")
    return lines


def _merge(into: RunResult, later: RunResult) -> None:
    """A later pass over some of the hosts: their failures and state are the later pass's, its
    counts added to theirs."""
    for host, s in later.hosts.items():
        mine = into.hosts.setdefault(host, HostSummary())
        for attr in ("ok", "changed", "skipped", "rescued"):
            setattr(mine, attr, getattr(mine, attr) + getattr(s, attr))
        mine.failed, mine.unreachable = s.failed, s.unreachable
    into.failures = [f for f in into.failures if f.host not in later.hosts] + later.failures
    for host, tasks in later.changed_tasks.items():
        into.changed_tasks.setdefault(host, []).extend(tasks)
    into.seconds += later.seconds
    into.stopped = into.stopped or later.stopped
    into.not_reached = into.not_reached or later.not_reached


def _error(result: RunResult) -> bool:
    """A run that ended for another reason than its hosts' failures (a timeout, a playbook
    error, ansible-playbook's other statuses): nothing to try again."""
    return result.rc != 0 and (result.rc not in (2, 4) or not result.failures)


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
    batch: int | None = None,
    max_fail_percent: int = MAX_FAIL_PERCENT,
    retries: int = 0,
    retry_wait_s: float = RETRY_WAIT_S,
) -> RunResult:
    """Converge the nodes of `inventory` with every role (or only `roles`) and the role
    variables `group_vars`; what happened, without raising on a failed host. The nodes that
    came back UNREACHABLE are tried again up to `retries` times, `retry_wait_s` apart, each time
    limited to them; where that brings every node back, the cluster-wide plays run once more
    over every node (they leave their files as they are while a node is missing)."""
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise ValueError(f"unknown role(s) {', '.join(unknown)}; roles are {', '.join(ROLES)}")
    inv = with_access(inventory, group_vars, private_key=private_key, known_hosts=known_hosts)
    extra = dict(extravars or {})
    if report_dir is not None:
        extra.setdefault("smoke_train_fetch_dir", str(report_dir.resolve()))
        extra.setdefault("dcgm_prometheus_file", str(report_dir.resolve() / "prometheus-dcgm.yml"))
    work = keep_artifacts or Path(tempfile.mkdtemp(prefix="rackform-configure-"))
    cache = work / "fact_cache"  # this run's own: nothing from an earlier run is read
    shutil.rmtree(cache, ignore_errors=True)

    def one(**kw: Any) -> RunResult:
        return run_playbook(
            inv,
            check=check,
            diff=diff,
            playbook=playbook,
            out=out,
            keep_artifacts=work,
            timeout_s=timeout_s,
            batch=batch,
            max_fail_percent=max_fail_percent,
            fact_cache=cache,
            **kw,
        )

    result = one(extravars=extra, limit=limit, tags=roles)
    errors = [result] if _error(result) else []
    recovered = False
    for attempt in range(1, retries + 1):
        lost = result.unreachable
        if not lost or result.stopped or errors:
            break
        out(
            f"{len(lost)} node(s) unreachable ({', '.join(lost)}): trying them again in "
            f"{retry_wait_s:g} s, limited to them (retry {attempt} of {retries})"
        )
        time.sleep(retry_wait_s)
        again = one(extravars=extra, limit=",".join(lost), tags=roles, announce=False)
        errors += [again] if _error(again) else []
        result.retries = attempt
        _merge(result, again)
        back = sorted(set(lost) - set(result.unreachable))
        recovered = recovered or bool(back)
        out(
            f"retry {attempt} of {retries}: "
            + (f"{', '.join(back)} converged" if back else "none came back")
            + (
                f"; still unreachable: {', '.join(result.unreachable)}"
                if result.unreachable
                else ""
            )
        )
    cluster = [r for r in CLUSTER_ROLES if not roles or r in roles]
    if recovered and not result.failures and not errors and cluster:
        out(
            "every node converged: the cluster-wide plays (Slurm's configuration, the scrape "
            "config, the smoke job) run again over every node, which they left as they were "
            "while a node was missing"
        )
        whole = one(
            extravars={**extra, "rackform_facts_from_this_run": True},
            limit=limit,
            tags=[CLUSTER_TAG],
            skip_tags=[r for r in CLUSTER_ROLES if r not in cluster],
            announce=False,
        )
        errors += [whole] if _error(whole) else []
        _merge(result, whole)
    if errors:  # the first pass that ended of itself says how the run ended
        result.rc, result.status = errors[0].rc, errors[0].status
    else:
        result.rc = 2 if result.failed else 4 if result.unreachable else 0
        result.status = "failed" if result.rc else "successful"
    result.artifacts = work
    if result.rc == 0 and keep_artifacts is None:
        shutil.rmtree(work, ignore_errors=True)
        result.artifacts = None
    return result


class ConfigureFailed(RuntimeError):
    """Ansible failed on some host; the message names each host, role and task (report_lines)."""

    def __init__(self, result: RunResult):
        self.result = result
        text = "".join(f"{x} " if x.endswith(":") else f"{x}; " for x in report_lines(result))
        super().__init__("configure failed: " + text.removesuffix("; "))


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
    JSON in, a summary out, ConfigureFailed when any host failed. `options` are `run`'s; a
    node that came back UNREACHABLE is tried again (UNREACHABLE_RETRIES) unless they say not."""
    options.setdefault("out", lambda line: print(line, file=sys.stderr))
    options.setdefault("retries", UNREACHABLE_RETRIES)
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
    checked is drift too: nobody knows what it holds. Every node is checked: no batch stops it."""
    options.setdefault("out", lambda line: print(line, file=sys.stderr))
    options.setdefault("max_fail_percent", 100)
    with access_files(access) as files:
        result = run(inventory, group_vars, check=True, **files, **options)
    hosts = {h: list(t) for h, t in result.changed_tasks.items()}
    for f in result.failures:
        hosts.setdefault(f.host, []).append(f"{f.role} : {f.task}: not checked: {f.message}")
    return {"hosts": hosts, "rc": result.rc}
