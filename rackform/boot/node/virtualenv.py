"""The node's virtualenv, where ansible-core (and on AWS boto3) is installed: made without pip,
with pip run from the wheel Python bundles, and left alone where a baked image already holds
every pinned requirement."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

from rackform.boot.node.log import run

VENV = Path("/opt/rackform/venv")


# Where Python keeps the pip wheel its ensurepip installs: Debian and Ubuntu in
# /usr/share/python-wheels (python3-pip-whl, which python3-venv depends on), a build of its own
# where its configure was told (WHEEL_PKG_DIR), an upstream build in ensurepip/_bundled.
WHEEL_DIRS = (
    Path("/usr/share/python-wheels"),
    Path(sysconfig.get_config_var("WHEEL_PKG_DIR") or "/nonexistent"),
    Path(sysconfig.get_paths()["stdlib"]) / "ensurepip" / "_bundled",
)


def bundled_pip(dirs: tuple[Path, ...] = WHEEL_DIRS) -> Path | None:
    """The newest pip wheel in the first of `dirs` that has one, or None."""
    for d in dirs:
        found = sorted(d.glob("pip-*.whl"), key=lambda w: _release(_version(w)))
        if found:
            return found[-1]
    return None


def _version(wheel: Path) -> str:
    """A wheel's version, from its file name (`pip-23.0.1-py3-none-any.whl`: 23.0.1)."""
    return wheel.name.split("-")[1]


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


def venv(root: Path = VENV, wheel: Path | None = None) -> list[str]:
    """A virtualenv at `root`, and the pip command line that installs into it; python3-venv
    from apt first where the image lacks it.

    The virtualenv is made without pip, and pip runs straight from the wheel Python bundles (as
    pip's installation guide allows: `python pip.whl/pip install ...`), installing itself in the
    same run as the requirements: `python3 -m venv` would first install pip and setuptools from
    those wheels and byte-compile both, the longest part of the step on a slow node. Without a
    bundled wheel, the plain `python3 -m venv` and the virtualenv's pip."""
    python = root / "bin" / "python"
    made = python.exists()  # by a run before a reboot: python3-venv is there already
    if not made:
        probe = subprocess.run(
            [sys.executable, "-m", "ensurepip", "--version"], capture_output=True
        )
        if probe.returncode != 0:
            run(["apt-get", "update", "-q"])
            run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "python3-venv"])
    wheel = wheel or bundled_pip()
    if wheel is None:
        if not made:
            run([sys.executable, "-m", "venv", str(root)])
        return [str(python), "-m", "pip", "install"]
    if not made:
        run([sys.executable, "-m", "venv", "--without-pip", str(root)])
    pin = f"pip=={_version(wheel)}"
    return [str(python), f"{wheel}/pip", "install", "--find-links", str(wheel.parent), pin]


def has_pinned(python: Path, requirements: list[str]) -> bool:
    """The virtualenv of `python` has every requirement, each an exact pin (`name==version`),
    at that version: what a node image's bake installed, which pip need not resolve again (a
    minute of a node's boot on an emulated CPU). A range, or anything unreadable: False."""
    pins = [r.split("==", 1) for r in requirements]
    if not pins or any(len(p) != 2 or not p[0] or not p[1] for p in pins) or not python.exists():
        return False
    code = (
        "import importlib.metadata as m, sys\n"
        "def have(n, v):\n"
        "    try:\n        return m.version(n) == v\n"
        "    except m.PackageNotFoundError:\n        return False\n"
        "sys.exit(0 if all(have(n, v) for n, v in zip(sys.argv[1::2], sys.argv[2::2])) else 1)"
    )
    args = [x.strip() for p in pins for x in p]
    return subprocess.run([str(python), "-c", code, *args], capture_output=True).returncode == 0
