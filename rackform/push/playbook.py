"""One run of a playbook over an inventory through ansible-runner: the site playbook by default,
with the live display, the forks and batches sized for the cluster, the strategy, and one fact
cache that never expires; what happened, host by host.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackform.paths import collections_root, site
from rackform.plan.configuring import tunnelled
from rackform.push import strategy
from rackform.push.forks import batches, forks
from rackform.push.progress import Failure, Progress
from rackform.push.site import site_playbook


@dataclass
class HostSummary:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0


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


def _ansible_playbook() -> Path:
    beside = Path(sys.executable).with_name("ansible-playbook")
    found = str(beside) if beside.exists() else shutil.which("ansible-playbook")
    if not found:
        raise FileNotFoundError(
            "ansible-playbook is not installed (pip install 'rackform[deploy]')"
        )
    return Path(found)


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
    max_fail_percent: int | None = None,
    fact_cache: Path | None = None,
    announce: bool = True,
) -> RunResult:
    """One run of `playbook` (the site playbook when None) over `inv`: what happened;
    `timeout_s`: ansible-runner ends the run past it (status `timeout`). `batch`: the nodes the
    GPU roles' play takes at a time (None: the fork width where the cluster is wider, else every
    node; 0: every node), with `max_fail_percent` (None: the playbook's own default; both are
    the site playbook's extra variables). Facts go to
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
    nodes = len(nodes_of(inv))
    progress = Progress(out)
    if max_fail_percent is None:
        max_fail_percent = site_playbook().max_fail_percent
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
        result.not_reached = [h for h in _within(nodes_of(inv), limit) if h not in done]
    if runner.rc == 0 and keep_artifacts is None:
        shutil.rmtree(work, ignore_errors=True)
        result.artifacts = None
    return result


def nodes_of(inv: Mapping[str, Any]) -> list[str]:
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
