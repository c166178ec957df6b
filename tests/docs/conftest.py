"""The documentation site built once for the session (tests/docs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def mkdocs_build(out: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of this checkout into `out`: every page in the navigation,
    every internal link and anchor resolving (mkdocs.yml's validation section)."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    r = mkdocs_build(out)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout}\n{r.stderr}"
    return out
