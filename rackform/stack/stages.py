"""Configure and Validate as resources (Python dynamic providers) that depend on the nodes, so one
`pulumi up` provisions, then configures, then validates, in that order.

Configure reruns only when its content hash changes: the roles' files, the role variables and
the inventory. Validate reruns when the blueprint digest, the configuration or the nodes change;
its report lands in the stack outputs, and with `validation.strict` a failed check fails `up`.

The work itself is injected: by default Configure calls `rackform.hosts.runner.configure` (the
Ansible roles) and Validate `rackform.validation.cluster.validate_cluster` (the smoke_train
role: host checks and the smoke job on every node).
Contract, both keyword-only and JSON in, JSON out:

    configure(*, inventory: dict, group_vars: dict) -> dict        # a summary; raises on failure
    validate_cluster(*, inventory: dict, group_vars: dict, validation: dict) -> dict
        # {"checks": [{"name", "status": "pass"|"fail"|"not-run", "measured", "expected", "unit"}]}
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult

from rackform.plan.inventory import inventory_hosts

CONFIGURE_WORK = "rackform.hosts.runner:configure"
VALIDATE_WORK = "rackform.validation.cluster:validate_cluster"
Work = Callable[..., dict] | str

CONFIGURE_INPUTS = (
    "cluster",
    "inventory",
    "group_vars",
    "roles_hash",
    "content_hash",
    "expected_nodes",
)
VALIDATE_INPUTS = (
    "cluster",
    "inventory",
    "group_vars",
    "validation",
    "digest",
    "configured_hash",
)


class StageUnavailable(Exception):
    """The implementation a stage calls is not in this checkout."""


class ValidationFailed(Exception):
    """A strict validation found a failing check (or nothing it could check)."""


def resolve(work: Work, stage: str) -> Callable[..., dict]:
    """A callable, or "module:function" imported now (in the provider's process)."""
    if callable(work):
        return work
    module, _, attr = work.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr, None)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module.startswith(exc.name):
            raise  # the module exists but something it imports does not: a real error
        fn = None
    if fn is None:
        raise StageUnavailable(
            f"{stage}: {module}.{attr} is not in this rackform checkout, so nothing was "
            f"{'configured' if stage == 'configure' else 'validated'}; install a rackform that "
            "has it (the Ansible roles / the smoke validator) and run `pulumi up` again"
        )
    return fn


def roles_hash(roles_dir: Path) -> str:
    """sha256 over every file under roles/ (relative path and bytes), in a stable order."""
    h = hashlib.sha256()
    if roles_dir.is_dir():
        for path in sorted(p for p in roles_dir.rglob("*") if p.is_file()):
            rel = path.relative_to(roles_dir).as_posix()
            if "__pycache__" in rel:
                continue
            h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return "sha256:" + h.hexdigest()


def content_hash(roles: str, group_vars: dict, inventory: dict) -> str:
    body = {"roles": roles, "group_vars": group_vars, "inventory": inventory}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def _inputs(props: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: props.get(k) for k in keys}


class ConfigureProvider(ResourceProvider):
    serialize_as_secret_always = False

    def __init__(self, work: Work = CONFIGURE_WORK):
        super().__init__()
        self.work = work

    def _run(self, props: dict[str, Any]) -> dict[str, Any]:
        hosts = inventory_hosts(props["inventory"])
        low, high = props["expected_nodes"]["min"], props["expected_nodes"]["max"]
        if not low <= len(hosts) <= high:
            want = str(low) if low == high else f"{low} to {high}"
            raise RuntimeError(
                f"configure: the inventory has {len(hosts)} hosts but the blueprint has {want} "
                "nodes; refusing to configure part of the cluster"
            )
        result = resolve(self.work, "configure")(
            inventory=props["inventory"], group_vars=props["group_vars"]
        )
        return {**_inputs(props, CONFIGURE_INPUTS), "result": result}

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"{props['cluster']}-configure", self._run(props))

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # The hash covers roles, variables and inventory; anything else (a cosmetic input) is not
        # a reason to run Ansible over a whole cluster again.
        changed = olds.get("content_hash") != news.get("content_hash")
        replaces = ["cluster"] if olds.get("cluster") != news.get("cluster") else []
        return DiffResult(changes=changed or bool(replaces), replaces=replaces, stables=[])

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(self._run(news))

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        """Configuration stays on the hosts; removing the resource changes nothing on them."""
        return None


def failed_checks(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in report.get("checks", []) if c.get("status") == "fail"]


def summarize(checks: list[dict[str, Any]]) -> str:
    parts = []
    for c in checks:
        unit = f" {c['unit']}" if c.get("unit") else ""
        parts.append(
            f"{c.get('name')}: measured {c.get('measured')}{unit}, expected {c.get('expected')}{unit}"
        )
    return "; ".join(parts)


class ValidateProvider(ResourceProvider):
    serialize_as_secret_always = False

    def __init__(self, work: Work = VALIDATE_WORK):
        super().__init__()
        self.work = work

    def _run(self, props: dict[str, Any]) -> dict[str, Any]:
        report = resolve(self.work, "validate")(
            inventory=props["inventory"],
            group_vars=props["group_vars"],
            validation=props["validation"],
        )
        checks = report.get("checks", [])
        failed = failed_checks(report)
        # A report in which nothing passed proved nothing: it never counts as a pass.
        passed = not failed and any(c.get("status") == "pass" for c in checks)
        if not passed and props["validation"].get("strict", True):
            why = summarize(failed) if failed else "no check passed (all not-run or none ran)"
            raise ValidationFailed(f"validation of {props['cluster']} failed: {why}")
        return {**_inputs(props, VALIDATE_INPUTS), "report": report, "passed": passed}

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"{props['cluster']}-validate", self._run(props))

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [k for k in VALIDATE_INPUTS if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=[], stables=[])

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(self._run(news))

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        return None


class Configure(pulumi.dynamic.Resource, module="rackform", name="Configure"):
    content_hash: pulumi.Output[str]
    result: pulumi.Output[dict]

    def __init__(
        self,
        name: str,
        props: dict[str, Any],
        provider: ConfigureProvider | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        args = {**{k: props[k] for k in CONFIGURE_INPUTS}, "result": None}
        super().__init__(provider or ConfigureProvider(), name, args, opts)


class Validate(pulumi.dynamic.Resource, module="rackform", name="Validate"):
    report: pulumi.Output[dict]
    passed: pulumi.Output[bool]

    def __init__(
        self,
        name: str,
        props: dict[str, Any],
        provider: ValidateProvider | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        args = {**{k: props[k] for k in VALIDATE_INPUTS}, "report": None, "passed": None}
        super().__init__(provider or ValidateProvider(), name, args, opts)
