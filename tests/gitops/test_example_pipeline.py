"""examples/gitops/pipeline.sh, the steps of the example GitHub Actions workflow, run against
real git repositories made here (a bare remote and a clone): a pull request's validate and
diff, the merge, staging up and validated (the real smoke job on this machine's CPU, standing
in for a runner inside the staging cluster), promotion with the evidence committed and pushed,
prod up, and the nightly drift. `pulumi` is the recording stand-in (stand_ins.py): this machine
has no Pulumi CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import stand_ins
import yaml
from gitrepo import IDENTITY, PIPE, commit, git, make_remote

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "gitops" / "pipeline.sh"
WORKFLOW = ROOT / "examples" / "gitops" / "rackform.yml"


@pytest.fixture
def pipeline(tmp_path):
    bin_dir = tmp_path / "bin"
    stand_ins.install(bin_dir)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    env = stand_ins.fake_pulumi.environ(bin_dir, tmp_path)
    env.update(IDENTITY)
    env.update(
        RACKFORM=f"{sys.executable} -m rackform",
        SMOKE_ARGS=f"--checkpoint-dir {ckpt} --no-host-checks",
        DRIFT_ARGS="--no-hosts --resources",  # the example's hosts are not reachable from here
    )

    def run(repo: Path, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(SCRIPT), *args],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )

    return run


def test_from_pull_request_through_promotion_to_nightly_drift(pipeline, tmp_path):
    remote, work = make_remote(tmp_path, {"blueprints/pipe.yaml": PIPE})
    git(work, "checkout", "-q", "-b", "more-steps")
    commit(work, "more smoke steps", {"blueprints/pipe.yaml": PIPE.replace(
        "smoke_steps: 10", "smoke_steps: 12")})  # fmt: skip

    pr = pipeline(work, "pr", "main")
    assert pr.returncode == 0, pr.stderr
    comment = (work / "diff.md").read_text()
    assert "## rackform diff `origin/main` → `HEAD`" in comment
    assert "### pipe (`blueprints/pipe.yaml`, modified)" in comment
    assert "| `validation.smoke_steps` | 10 | 12 |" in comment

    git(work, "checkout", "-q", "main")
    git(work, "merge", "-q", "--no-ff", "-m", "Merge more-steps", "more-steps")
    git(work, "push", "-q", "origin", "main")
    (work / "diff.md").unlink()

    staging = pipeline(work, "staging", "blueprints/pipe.yaml")
    assert staging.returncode == 0, staging.stdout[-3000:] + staging.stderr[-3000:]
    evidence = json.loads((work / "evidence.json").read_text())["evidence"]
    assert evidence["environment"] == "staging" and evidence["passed"] is True
    assert evidence["commit"] == git(work, "rev-parse", "HEAD")
    assert "pipe-staging" in " ".join(" ".join(a) for a in stand_ins.calls(tmp_path))

    promote = pipeline(work, "promote", "blueprints/pipe.yaml")
    assert promote.returncode == 0, promote.stderr
    assert "fake pulumi up on stack pipe-prod" in promote.stdout
    # The record reached the remote, in its own commit.
    assert git(remote, "log", "-1", "--format=%s", "main") == "promote pipe: staging -> prod"
    record = json.loads(git(remote, "show", "main:promotions/pipe-prod.json"))
    assert record["evidence"]["content"] == evidence["content"]

    drift = pipeline(work, "drift", "blueprints/pipe.yaml", "prod")
    assert drift.returncode == 0, drift.stderr
    assert "no drift (resources checked)" in drift.stdout


def test_a_pull_request_with_an_invalid_blueprint_fails_the_check(pipeline, tmp_path):
    _, work = make_remote(tmp_path, {"blueprints/pipe.yaml": PIPE})
    git(work, "checkout", "-q", "-b", "typo")
    commit(work, "typo", {"blueprints/pipe.yaml": PIPE.replace("fabric: ethernet", "fabric: ib")})
    pr = pipeline(work, "pr", "main")
    assert pr.returncode == 2  # validate names the field; nothing further runs
    assert "blueprints/pipe.yaml:" in pr.stderr and "network.fabric" in pr.stderr


def test_the_workflow_runs_the_same_steps():
    doc = yaml.safe_load(WORKFLOW.read_text())
    runs = "\n".join(s.get("run", "") for job in doc["jobs"].values() for s in job["steps"])
    for step in ("$PIPELINE pr", "$PIPELINE staging", "$PIPELINE promote", "$PIPELINE drift"):
        assert step in runs
    pr = doc["jobs"]["pull-request"]["steps"][0]
    assert pr["with"]["fetch-depth"] == 0  # a shallow clone lacks the base
