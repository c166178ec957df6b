"""Driving the real Pulumi CLI through the Automation API: the state backend, the stack and its
config, and the operation with Pulumi's own exit status.

The Automation API shells out to the `pulumi` executable; nothing here downloads it. Where it is
missing, `PulumiMissing` says how to get it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from rackform.plan.model import Plan

STATE_ENV = "RACKFORM_STATE"
DEFAULT_STATE = Path("~/.rackform/state")
PASSPHRASE_VARS = ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE")
OPERATIONS = ("preview", "up", "destroy")
_CODE = re.compile(r"^\s*code: (-?\d+)\s*$", re.MULTILINE)


class WorkspaceError(Exception):
    """Something the user can fix before Pulumi can run (one line, with the fix)."""


class PulumiMissing(WorkspaceError):
    pass


def backend_url(environ: Mapping[str, str] | None = None) -> str:
    """PULUMI_BACKEND_URL when set; else a local file backend in RACKFORM_STATE or
    ~/.rackform/state (no account, no network)."""
    env = os.environ if environ is None else environ
    if env.get("PULUMI_BACKEND_URL"):
        return env["PULUMI_BACKEND_URL"]
    state = Path(env.get(STATE_ENV) or DEFAULT_STATE).expanduser().resolve()
    return f"file://{state}"


def needs_passphrase(url: str) -> bool:
    """Self-managed backends (file, s3, gs, azblob, postgres) keep secrets with a passphrase
    unless a stack says otherwise; Pulumi Cloud (https://) manages its own."""
    return not url.startswith(("https://", "http://"))


def _workspace(plan: Plan, root: Path | None) -> auto.LocalWorkspaceOptions:
    """The workspace of the project at `root` on the configured backend, once the CLI, the
    project and the passphrase are there (each missing one is a WorkspaceError with the fix)."""
    if root is None:
        raise WorkspaceError(
            f"{plan.source}: no Pulumi project (Pulumi.yaml) holds this blueprint or the "
            "working directory; run `rackform init DIR` to make one, or set RACKFORM_PROJECT"
        )
    if shutil.which("pulumi") is None:
        raise PulumiMissing(
            "the pulumi CLI is not on PATH; install it (https://www.pulumi.com/docs/install/, "
            "e.g. `curl -fsSL https://get.pulumi.com | sh`) and retry, or use `rackform plan` "
            "for an offline plan"
        )
    url = backend_url()
    if needs_passphrase(url) and not any(os.environ.get(v) is not None for v in PASSPHRASE_VARS):
        raise WorkspaceError(
            f"the state backend {url} encrypts stack secrets with a passphrase: set "
            "PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE) and retry"
        )
    if url.startswith("file://"):
        Path(url.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
    return auto.LocalWorkspaceOptions(work_dir=str(root), env_vars={"PULUMI_BACKEND_URL": url})


def open_stack(plan: Plan, root: Path | None, extra: Mapping[str, str] | None = None) -> auto.Stack:
    """Select (or create) the stack `<name>-<env>` of the project at `root`, and set its config
    to the plan's (the same file `rackform compile` writes) and `extra` (e.g. a validation
    request)."""
    return _open(plan, root, plan.stack, {**plan.stack_config, **(extra or {})})


def open_data_stack(
    plan: Plan, root: Path | None, extra: Mapping[str, str] | None = None
) -> auto.Stack:
    """The same for the data tier's own stack (`plan.data_stack`), with its config."""
    return _open(plan, root, plan.data_stack, {**plan.data_stack_config, **(extra or {})})


def _open(plan: Plan, root: Path | None, name: str, config: Mapping[str, str]) -> auto.Stack:
    opts = _workspace(plan, root)
    stack = auto.create_or_select_stack(stack_name=name, work_dir=str(root), opts=opts)
    stack.set_all_config({k: auto.ConfigValue(value=v) for k, v in config.items()})
    return stack


def held_urns(plan: Plan, root: Path | None, name: str) -> set[str] | None:
    """The URNs the state of the stack `name` holds (`pulumi stack export`); None where there
    is no such stack. Nothing is created or changed."""
    opts = _workspace(plan, root)
    try:
        stack = auto.select_stack(stack_name=name, work_dir=str(root), opts=opts)
        deployment = stack.export_stack().deployment or {}
    except auto.StackNotFoundError:
        return None
    except auto.CommandError as exc:
        raise WorkspaceError(f"stack {name}: state not read ({_first_line(exc)})") from None
    return {r["urn"] for r in deployment.get("resources") or [] if r.get("urn")}


def pulumi_command(plan: Plan, root: Path | None, args: list[str]) -> tuple[int, str]:
    """`pulumi ARGS` in the project at `root` on the configured backend, for what the
    Automation API does not offer (`pulumi state move`); its exit status and output."""
    opts = _workspace(plan, root)
    env = {**os.environ, **(opts.env_vars or {})}
    done = subprocess.run(
        ["pulumi", "--non-interactive", *args],
        cwd=str(root),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).strip()


def stack_outputs(plan: Plan, root: Path | None) -> dict[str, Any]:
    """The outputs of the existing stack `<name>-<env>`, as the engine recorded them at its last
    update (nothing is created or configured)."""
    opts = _workspace(plan, root)
    try:
        stack = auto.select_stack(stack_name=plan.stack, work_dir=str(root), opts=opts)
        outputs = stack.outputs()
    except auto.StackNotFoundError:
        raise WorkspaceError(
            f"stack {plan.stack} does not exist on {backend_url()}: `rackform up` it first"
        ) from None
    except auto.CommandError as exc:
        raise WorkspaceError(f"stack {plan.stack}: outputs not read ({_first_line(exc)})") from None
    return {k: v.value for k, v in outputs.items()}


def _first_line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip().startswith("error")]
    return lines[0] if lines else "pulumi failed"


def exit_code(error: auto.CommandError) -> int:
    """Pulumi's exit status. The Automation API keeps it only in the error's text
    (`CommandResult.__str__`: "\\n code: N\\n stdout: ..."), so it is read back from there."""
    found = _CODE.search(str(error))
    return int(found.group(1)) if found else 1


def run(
    stack: auto.Stack,
    operation: str,
    on_output: Callable[[str], object],
    on_error: Callable[[str], object],
    refresh: bool = False,
    targets: list[str] | None = None,
) -> int:
    """Run preview, up or destroy, streaming Pulumi's output; return Pulumi's exit status.
    `refresh`: read the resources' live state first (`--refresh`; up and preview only).
    `targets`: only these resources, by URN (`--target`, globs allowed: Pulumi docs, "Targeted
    updates"); the others are left as they are."""
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}")
    act = getattr(stack, operation)
    extra: dict[str, Any] = {"refresh": True} if refresh else {}
    if targets:
        extra["target"] = list(targets)
    try:
        act(on_output=on_output, on_error=on_error, **extra)
    except auto.CommandError as exc:
        return exit_code(exc)
    return 0
