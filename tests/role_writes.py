"""What every role's tasks write on a host, read from the task files (tests import it by name:
`from role_writes import writes`): each file-writing task's destination, rendered with its
role's defaults and private variables, the OS variables of each supported OS and the facts of
a host, one destination per loop item. A destination that needs what only a run knows (a
registered result, another host's facts) stays the template it is, named after its role."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from gpu_collection import ROLES_DIR

ROLES = sorted(p.parent.parent.name for p in ROLES_DIR.glob("*/tasks/main.yml"))
FACTS = {
    "Ubuntu": {"distribution": "Ubuntu", "distribution_version": "22.04",
               "distribution_major_version": "22", "distribution_release": "jammy"},
    "Debian": {"distribution": "Debian", "distribution_version": "12.8",
               "distribution_major_version": "12", "distribution_release": "bookworm"},
}  # fmt: skip
HOST = {"architecture": "x86_64", "os_family": "Debian", "kernel": "6.1.0-28-amd64",
        "hostname": "node1", "fqdn": "node1",
        "default_ipv4": {"address": "10.0.0.11", "interface": "eth0"}}  # fmt: skip


@dataclass(frozen=True)
class Write:
    role: str
    where: str  # the task file, relative to the role
    task: str
    module: str
    path: str  # the destination, rendered where it could be
    args: dict


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None


def variables(role: str, os_name: str, extra: dict | None = None) -> dict:
    """What a task of `role` sees on a host of `os_name`: the role's defaults, private and OS
    variables, the host's facts, and `extra` (the cluster's variables) over the defaults."""
    base = ROLES_DIR / role
    defaults = _load(base / "defaults" / "main.yml") or {}
    own = _load(base / "vars" / "main.yml") or {}
    os_vars = _load(base / "vars" / f"{os_name}.yml") or {}
    facts = {**HOST, **FACTS[os_name]}
    out = {**defaults, **(extra or {}), **own, **os_vars}
    out = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in out.items()}
    return {
        **out,
        "ansible_facts": facts,
        "ansible_check_mode": False,
        "inventory_hostname": "node1",
        "groups": {"all": ["node1"], "gpu_nodes": ["node1"]},
        "role_path": str(base),
    }


def render(value: Any, env: dict) -> Any:
    templar = Templar(loader=DataLoader(), variables=env)
    if isinstance(value, str):
        value = trust_as_template(value)
    elif isinstance(value, list):
        value = [trust_as_template(v) if isinstance(v, str) else v for v in value]
    return templar.template(value)


def tasks(node) -> list[dict]:
    """Every task of a task list, blocks opened."""
    out = []
    for t in node or []:
        out.append(t)
        for key in ("block", "rescue", "always"):
            out += tasks(t.get(key))
    return out


def _destinations(module: str, args: dict) -> list[str]:
    """The paths a module's arguments write (templates, not rendered)."""
    short = module.rsplit(".", 1)[-1]
    if short in ("template", "copy", "get_url", "unarchive"):
        return [args["dest"]] if "dest" in args else []
    if short in ("lineinfile", "blockinfile", "file"):
        return [args["path"]] if "path" in args else []
    if short == "deb822_repository":
        return [f"/etc/apt/sources.list.d/{args['name']}.sources"]
    if short == "mount":
        return [f"fstab:{args['path']}"]
    if short in ("command", "shell") and "creates" in args:
        return [args["creates"]]
    return []


def writes(role: str) -> list[Write]:
    """Every destination the tasks in `role`'s own task files write, on each supported OS."""
    out: list[Write] = []
    base = ROLES_DIR / role
    for path in sorted([*base.glob("tasks/*.yml"), *base.glob("handlers/*.yml")]):
        for task in tasks(_load(path)):
            module = next((k for k in task if "." in k), None)
            if module is None or not isinstance(task[module], dict):
                continue
            for dest in _destinations(module, task[module]):
                for os_name in FACTS:
                    env = variables(role, os_name)
                    items = [None]
                    loop = task.get("loop")
                    if loop is not None:
                        try:
                            items = list(render(loop, env))
                        except Exception:
                            items = []
                            out.append(
                                Write(
                                    role,
                                    f"{path.parent.name}/{path.name}",
                                    task["name"],
                                    module,
                                    f"{role}:{dest}",
                                    task[module],
                                )
                            )
                    for item in items:
                        try:
                            rendered = str(render(dest, {**env, "item": item}))
                        except Exception:
                            rendered = f"{role}:{dest}"  # what only a run knows
                        if not rendered:
                            continue  # nothing to write without its variable (empty default)
                        if task.get("delegate_to") == "localhost":
                            rendered = f"controller:{rendered}"
                        out.append(
                            Write(
                                role,
                                f"{path.parent.name}/{path.name}",
                                task["name"],
                                module,
                                rendered,
                                task[module],
                            )
                        )
    return out


def entries(role: str) -> list[tuple[str, str]]:
    """(role, task file) of the other roles' task files that `role`'s tasks enter
    (include_role / import_role with tasks_from)."""
    out = []
    for path in sorted((ROLES_DIR / role / "tasks").glob("*.yml")):
        for task in tasks(_load(path)):
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                if key in task and "tasks_from" in task[key]:
                    name = task[key]["name"].rsplit(".", 1)[-1]
                    out.append((name, task[key]["tasks_from"].removesuffix(".yml") + ".yml"))
    return out
