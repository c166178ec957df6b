"""The stack config a cluster's stack carries, and where the repository is. Pure: shared by the
program, the offline plan and the Automation API wrapper, so all three agree."""

from __future__ import annotations

from pathlib import Path

from rackform.blueprint.loader import DEFAULT_ENV, Effective


def repo_root() -> Path:
    """The checkout that holds Pulumi.yaml, stacks/, roles/ and blueprints/."""
    return Path(__file__).resolve().parents[2]


def resolve_blueprint(value: str, root: Path) -> Path:
    """`rackform:blueprint` is relative to the repository root (not the current directory, which
    differs between `pulumi up`, the Automation API and tests), or absolute."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else root / path


def environment_arg(value: str | None) -> str | None:
    """`rackform:environment`: empty or "default" means the base blueprint."""
    return None if value in (None, "", DEFAULT_ENV) else value


def stack_config(effective: Effective, root: Path) -> dict[str, str]:
    """What `stacks/__main__.py` reads: the blueprint (relative to the repository root when it is
    inside it, so a stack file is portable) and the environment; and aws:region from the
    blueprint, which the AWS provider needs."""
    path = Path(effective.source).resolve()
    try:
        shown = path.relative_to(root.resolve()).as_posix()
    except ValueError:
        shown = str(path)
    config = {"rackform:blueprint": shown, "rackform:environment": effective.environment}
    target = effective.blueprint.target
    if target.type == "aws":
        config["aws:region"] = target.region
    return config
