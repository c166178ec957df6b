"""Shared fixtures. The suite's shared data and helpers live in tests/blueprint_helpers.py:
every conftest.py is imported under the one name `conftest`, so a test that imported from it got
whichever conftest pytest loaded last (tests/e2e/conftest.py broke collection that way)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import blueprint_helpers  # noqa: F401  (imports torch._dynamo before ansible-core; see there)
import dist_build
import pytest


@pytest.fixture
def write(tmp_path):
    def _write(text: str, name: str = "bp.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return _write


@pytest.fixture(scope="session", autouse=True)
def rollout_state(tmp_path_factory) -> Path:
    """The lifecycle's state directory where a command is given no --state-dir (where
    `rackform configure` records what the nodes run): a directory of the session's, named by
    both variables, so that neither the user's ~/.rackform nor an earlier release's place in it
    is ever read."""
    path = tmp_path_factory.mktemp("rollout-state")
    os.environ["RACKFORM_ROLLOUT_DIR"] = str(path)
    os.environ["RACKFORM_REAP_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def dist(tmp_path_factory) -> dist_build.Dist:
    """The wheel and sdist, built once for the session (see tests/dist_build.py)."""
    return dist_build.build(tmp_path_factory.mktemp("dist"))
