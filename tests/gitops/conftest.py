"""Fixtures of the GitOps tests: the rackform command run in a directory, as a user runs it;
moto's server on loopback (tests/moto_server.py) for an AWS cluster's instances."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from moto_server import aws, endpoint  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def rackform():
    def run(*args, cwd: Path, env: dict | None = None, timeout: float = 300):
        return subprocess.run(
            [sys.executable, "-m", "rackform", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=cwd,
            env=env,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    return run
