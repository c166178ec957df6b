"""Where rackform's own files are, and how a path a user gives is read.

The Ansible roles, the site playbook, the probe modules and the validators are the Ansible
collection `rackform.gpu`, whose one copy is the repository's top level (`roles/`,
`validators/`, `collection/`; rackform.collection says what goes where). An installed wheel
carries the collection inside the package (its build writes it there); a checkout runs it from
`build/ansible_collections/`, made from the top level when a file there changed. The Pulumi
project is the user's: the directory holding Pulumi.yaml (this checkout, or a repository made by
`rackform init`). A path the user gives on the command line (a blueprint, an output directory) is
relative to the current directory; a path in a stack config (`rackform:blueprint`) is relative
to the Pulumi project, because `pulumi up`, the Automation API and tests all run the program
from there, whatever directory the user started in.
"""

from __future__ import annotations

import os
import sys
from functools import cache
from pathlib import Path

from rackform import collection as _collection

PACKAGE = Path(__file__).resolve().parent
# A checkout's top level (the collection's sources are there), or site-packages in a wheel.
CHECKOUT = PACKAGE.parent
COLLECTION_NAME = "rackform.gpu"


@cache
def collections_root() -> Path:
    """The ANSIBLE_COLLECTIONS_PATH entry holding ansible_collections/rackform/gpu: the
    package's own in an installed wheel, else the checkout's build/ (made from the sources)."""
    packaged = PACKAGE / "ansible_collections" / "rackform" / "gpu" / "galaxy.yml"
    if packaged.is_file() or not _collection.is_source(CHECKOUT):
        return PACKAGE
    _collection.built(CHECKOUT, CHECKOUT / "build")
    return CHECKOUT / "build"


def collection() -> Path:
    """The collection's directory (galaxy.yml, roles/, plugins/, playbooks/)."""
    return collections_root() / "ansible_collections" / "rackform" / "gpu"


def site() -> Path:
    """The playbook `rackform configure` runs."""
    return collection() / "playbooks" / "site.yml"


def validators_dir() -> Path:
    """The validators as they ship to nodes (and as `rackform smoke` runs them here)."""
    return collection() / "roles" / "smoke_train" / "files" / "validators"


def validators_importable() -> Path:
    """Make the validators, as they ship to nodes, importable here as the package `validators`
    (`rackform smoke` runs them; the goodput simulation runs their take-back rule): their
    directory's parent on sys.path. That directory."""
    root = validators_dir().parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return root


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
