"""The Getting started page's commands, run as written in an empty temporary directory.

The page marks what a reader types: every ```sh block between `<!-- getting-started -->` and
`<!-- /getting-started -->`. They run in order in one bash, with `rackform` this checkout's
(`python -m rackform` with the worktree first on the path), so the first page a user follows
cannot rot: init, a blueprint of their own, validate, plan offline, compile."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"
MARKED = re.compile(r"<!-- getting-started -->\n(.*?)<!-- /getting-started -->", re.S)
BLOCK = re.compile(r"```sh\n(.*?)```", re.S)


def blocks(text: str) -> list[str]:
    return [b for part in MARKED.findall(text) for b in BLOCK.findall(part)]


def test_the_page_marks_the_whole_offline_path():
    script = "\n".join(blocks(PAGE.read_text()))
    for step in ("rackform init", "rackform validate", "rackform plan", "rackform compile"):
        assert step in script, f"Getting started no longer runs `{step}` in a tested block"


def test_getting_started_runs_as_written(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "rackform"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rackform "$@"\n')
    shim.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    env.pop("RACKFORM_PROJECT", None)
    t0 = time.monotonic()
    script = "set -euo pipefail\nset -x\n" + "\n".join(blocks(PAGE.read_text()))
    r = subprocess.run(
        ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    print(f"getting started: {time.monotonic() - t0:.1f} s in {work}")
    assert r.returncode == 0, (
        f"a Getting started command failed (exit {r.returncode}):\n{r.stderr[-4000:]}"
    )
    clusters = work / "clusters"
    assert (clusters / "blueprints" / "first.yaml").is_file()
    assert "valid" in r.stdout
    assert (clusters / "build" / "blueprint.effective.json").is_file()
    assert (clusters / "build" / "inventory" / "hosts.yml").is_file()
    assert '"resources"' in (clusters / "plan.json").read_text()
