"""A push over a cluster: the site playbook over every node, then the nodes that came back
UNREACHABLE tried again (limited to them, after a wait), and, where that brought every one back,
the cluster-wide plays once more over every node; one result for the whole run."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rackform.push.access import with_access
from rackform.push.playbook import HostSummary, RunResult, run_playbook
from rackform.push.site import CLUSTER_TAG, site_playbook

# A node that came back UNREACHABLE (about 3% of 2,000 hosts on any run, in the field) is
# tried again this many times, RETRY_WAIT_S apart.
UNREACHABLE_RETRIES = 2
RETRY_WAIT_S = 30


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
    max_fail_percent: int | None = None,
    retries: int = 0,
    retry_wait_s: float = RETRY_WAIT_S,
) -> RunResult:
    """Converge the nodes of `inventory` with every role (or only `roles`) and the role
    variables `group_vars`; what happened, without raising on a failed host. The nodes that
    came back UNREACHABLE are tried again up to `retries` times, `retry_wait_s` apart, each time
    limited to them; where that brings every node back, the cluster-wide plays run once more
    over every node (they leave their files as they are while a node is missing).
    `max_fail_percent`: None for the playbook's own default."""
    plays = site_playbook()
    known = plays.roles
    unknown = sorted(set(roles) - set(known))
    if unknown:
        raise ValueError(f"unknown role(s) {', '.join(unknown)}; roles are {', '.join(known)}")
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
    cluster = [r for r in plays.cluster_roles if not roles or r in roles]
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
            skip_tags=[r for r in plays.cluster_roles if r not in cluster],
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
