"""The site playbook as a push reads it: its roles, in the order its plays apply them; the roles
its cluster-wide plays run (the plays tagged CLUSTER_TAG, which write what spans every node);
the check its batched play makes before each batch; and the share of a batch that may fail
before that check stops the run, where nothing sets `rackform_max_fail_percent`. All are read
from the playbook itself, once per process, so a role added to it is a role the push knows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from rackform.paths import site

# The tag of the plays that write what spans every node: what a push runs again over every
# node once a retry brought back the nodes they waited for.
CLUSTER_TAG = "rackform_cluster"
MAX_FAIL_VARIABLE = "rackform_max_fail_percent"
_MAX_FAIL_DEFAULT = re.compile(rf"{MAX_FAIL_VARIABLE}\s*\|\s*default\(\s*(\d+)\s*\)")
_ROLE_TASKS = ("ansible.builtin.import_role", "ansible.builtin.include_role")


class PlaybookError(ValueError):
    """The playbook does not hold what a push reads from it."""


@dataclass(frozen=True)
class SitePlaybook:
    roles: tuple[str, ...]  # each role a play applies whole, tagged with its name
    cluster_roles: tuple[str, ...]  # those a play tagged CLUSTER_TAG runs, in `roles` order
    batch_check: str  # the name of the task that stops the run before a batch
    max_fail_percent: int  # `rackform_max_fail_percent`'s default


def _role_name(name: str) -> str:
    return name.rsplit(".", 1)[-1]  # rackform.gpu.dcgm -> dcgm


def _tasks(block: list[dict[str, Any]] | None):
    """Every task of a task list, those inside blocks too."""
    for task in block or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def parse(text: str, source: str = "site.yml") -> SitePlaybook:
    """What a push reads from the site playbook `text` (`source` names it in errors)."""
    plays = yaml.safe_load(text)
    if not isinstance(plays, list):
        raise PlaybookError(f"{source}: not a list of plays")
    roles: list[str] = []
    cluster: set[str] = set()
    checks: list[str] = []
    for play in plays:
        applied = [
            _role_name(r["role"] if isinstance(r, dict) else r) for r in play.get("roles") or []
        ]
        roles += [r for r in applied if r not in roles]
        tasks = [t for key in ("pre_tasks", "tasks", "post_tasks") for t in _tasks(play.get(key))]
        if CLUSTER_TAG in (play.get("tags") or []):
            imported = [t[k]["name"] for t in tasks for k in _ROLE_TASKS if k in t]
            cluster.update(applied, map(_role_name, imported))
        checks += [
            t["name"]
            for t in tasks
            if "ansible.builtin.assert" in t
            and MAX_FAIL_VARIABLE in str(t["ansible.builtin.assert"])
        ]
    defaults = set(map(int, _MAX_FAIL_DEFAULT.findall(text)))
    if len(defaults) != 1:
        found = ", ".join(map(str, sorted(defaults))) or "none"
        raise PlaybookError(
            f"{source}: `{MAX_FAIL_VARIABLE} | default(N)` should give one N, found {found}"
        )
    if len(checks) != 1:
        raise PlaybookError(
            f"{source}: one assert task should read {MAX_FAIL_VARIABLE}, found {len(checks)}"
        )
    return SitePlaybook(
        roles=tuple(roles),
        cluster_roles=tuple(r for r in roles if r in cluster),
        batch_check=checks[0],
        max_fail_percent=defaults.pop(),
    )


def read(path: Path) -> SitePlaybook:
    return parse(path.read_text(encoding="utf-8"), str(path))


@cache
def site_playbook() -> SitePlaybook:
    """The site playbook a push runs (`rackform.paths.site`), read once."""
    return read(site())
