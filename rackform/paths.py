"""Where rackform's own files are, and how a path a user gives is read.

The Ansible roles, the site playbook, the probe modules and the validators ship inside the
package as the Ansible collection `rackform.gpu` (ansible_collections/rackform/gpu/, with the
validators in its smoke_train role's files), so an installed wheel runs the same single copy as
a checkout. The Pulumi project is the user's: the directory holding Pulumi.yaml (this checkout,
or a repository made by `rackform init`). A path the user gives on the command line (a blueprint, an output
directory) is relative to the current directory; a path in a stack config
(`rackform:blueprint`) is relative to the Pulumi project, because `pulumi up`, the Automation
API and tests all run the program from there, whatever directory the user started in.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# ANSIBLE_COLLECTIONS_PATH entry: the directory that holds ansible_collections/.
COLLECTIONS_ROOT = PACKAGE
COLLECTION = COLLECTIONS_ROOT / "ansible_collections" / "rackform" / "gpu"
COLLECTION_NAME = "rackform.gpu"
ROLES_DIR = COLLECTION / "roles"
SITE = COLLECTION / "playbooks" / "site.yml"
VALIDATORS_DIR = ROLES_DIR / "smoke_train" / "files" / "validators"
PROJECT_ENV = "RACKFORM_PROJECT"


def project_root(near: Path | None = None) -> Path | None:
    """The Pulumi project: $RACKFORM_PROJECT; else the nearest directory holding Pulumi.yaml
    from `near` (a blueprint's directory) upwards, then from the working directory upwards;
    None where there is none (offline commands work without one; `up` says to make one)."""
    env = os.environ.get(PROJECT_ENV)
    if env:
        return Path(env).expanduser().resolve()
    for start in (near, Path.cwd()):
        if start is None:
            continue
        here = Path(start).resolve()
        for candidate in (here, *here.parents):
            if (candidate / "Pulumi.yaml").is_file():
                return candidate
    return None


def user_path(value: str | Path, cwd: Path | None = None) -> Path:
    """A path from the command line: `~` expanded, relative to the working directory."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else (cwd or Path.cwd()) / path


def config_path(value: str, project: Path) -> Path:
    """A path from a stack config: relative to the Pulumi project, or absolute."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else project / path


def shown_in_config(path: Path, project: Path | None) -> str:
    """How a stack config names `path`: relative to the project when inside it (so a stack file
    is portable between checkouts), else absolute."""
    path = path.resolve()
    if project is None:
        return str(path)
    try:
        return path.relative_to(project.resolve()).as_posix()
    except ValueError:
        return str(path)


def cache_dir() -> Path:
    """rackform's cache on this machine (built artifacts, the testbed's image and package
    repository): $RACKFORM_CACHE, else $XDG_CACHE_HOME/rackform (the XDG base directory
    rule: an unset, empty or relative value is ignored), else ~/.cache/rackform."""
    env = os.environ.get("RACKFORM_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "rackform"
