"""The wheel and sdist a user installs, built once per test session with `python -m build`
(the wheel is built from the sdist, so a file the sdist leaves out is missing from the wheel
too). tests/packaging reads their contents; tests/e2e/test_wheel_vms.py installs the wheel into
a fresh virtualenv and runs rackform from an empty directory."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path
    version: str


def version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def build(out: Path) -> Dist:
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    v = version()
    return Dist(out / f"rackform-{v}-py3-none-any.whl", out / f"rackform-{v}.tar.gz", v)


def tracked(prefix: str) -> list[str]:
    """The files git tracks under `prefix` (what a fresh clone has; the working tree may hold
    caches and scratch files that are no part of the package)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", prefix], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return sorted(p for p in out.split("\0") if p)
