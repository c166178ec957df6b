"""Where rackform's own files are, and how a path a user gives is read.

The Pulumi project (Pulumi.yaml, stacks/), the Ansible roles and the validators sit beside the
package in a checkout. A path the user gives on the command line (a blueprint, an output
directory) is relative to the current directory; a path in a stack config
(`rackform:blueprint`) is relative to the Pulumi project, because `pulumi up`, the Automation
API and tests all run the program from there, whatever directory the user started in.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parent
ROLES_DIR = CHECKOUT / "roles"
VALIDATORS_DIR = CHECKOUT / "validators"


def project_root() -> Path:
    """The Pulumi project: the directory holding Pulumi.yaml, stacks/, roles/ and blueprints/."""
    return CHECKOUT


def user_path(value: str | Path, cwd: Path | None = None) -> Path:
    """A path from the command line: `~` expanded, relative to the working directory."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else (cwd or Path.cwd()) / path


def config_path(value: str, project: Path) -> Path:
    """A path from a stack config: relative to the Pulumi project, or absolute."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else project / path


def shown_in_config(path: Path, project: Path) -> str:
    """How a stack config names `path`: relative to the project when inside it (so a stack file
    is portable between checkouts), else absolute."""
    path = path.resolve()
    try:
        return path.relative_to(project.resolve()).as_posix()
    except ValueError:
        return str(path)


def cache_dir() -> Path:
    """rackform's cache on this machine (built artifacts): $RACKFORM_CACHE, else
    ~/.cache/rackform."""
    env = os.environ.get("RACKFORM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "rackform"
