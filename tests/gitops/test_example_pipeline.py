"""examples/gitops/pipeline.sh, the steps of the example GitHub Actions workflow, run against
real git repositories made here (a bare remote and a clone): a pull request's validate and
diff, the merge, staging up (its Validate stage signs the report with the staging deploy's
key), promotion on that evidence read from staging's stack, committed and pushed, prod up, and
the nightly drift. `pulumi` is the recording stand-in (stand_ins.py): this machine has no
Pulumi CLI, so the outputs staging's `up` records are made by the program under Pulumi's mocks
with the real Validate provider (staged.py) and handed to the stand-in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import staged
import stand_ins
import yaml
from gitrepo import IDENTITY, commit, git, make_remote
from promotion_world import PIPE, keypair, keys_file

from rackform.evidence.signing import SIGNING_ENV

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "gitops" / "pipeline.sh"
WORKFLOW = ROOT / "examples" / "gitops" / "rackform.yml"


@pytest.fixture
def pipeline(tmp_path):
    bin_dir = tmp_path / "bin"
    stand_ins.install(bin_dir)
    env = stand_ins.fake_pulumi.environ(bin_dir, tmp_path)
    env.update(IDENTITY)
    env.update(
        RACKFORM=f"{sys.executable} -m rackform",
        DRIFT_ARGS="--no-hosts --resources",  # the example's hosts are not reachable from here
    )

    def run(repo: Path, *args: str, **secrets: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(SCRIPT), *args],
            cwd=repo,
            env={**env, **secrets},
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )

    return run


def test_from_pull_request_through_promotion_to_nightly_drift(pipeline, tmp_path, monkeypatch):
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    pem, key = keypair(secrets, "staging")
    keys = keys_file([("staging-deploy", key, ["staging"])])
    remote, work = make_remote(
        tmp_path, {"blueprints/pipe.yaml": PIPE, "promotion-keys.yaml": keys}
    )
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

    unsigned = pipeline(work, "staging", "blueprints/pipe.yaml")
    assert (
        unsigned.returncode == 2 and "RACKFORM_EVIDENCE_SIGNING_KEY is not set" in unsigned.stderr
    )
    staging = pipeline(work, "staging", "blueprints/pipe.yaml", **{SIGNING_ENV: str(pem)})
    assert staging.returncode == 0, staging.stdout[-3000:] + staging.stderr[-3000:]
    assert "fake pulumi up on stack pipe-staging" in staging.stdout
    assert "smoke" not in " ".join(staging.stderr.splitlines())  # nothing validated on the runner
    # What that `up` recorded: the program's outputs, its Validate stage's signed statement.
    monkeypatch.setenv(SIGNING_ENV, str(pem))
    outputs = staged.up(work, work / "blueprints" / "pipe.yaml", "staging")
    monkeypatch.delenv(SIGNING_ENV)
    stand_ins.fake_pulumi.set_outputs(tmp_path, "pipe-staging", outputs)

    promote = pipeline(work, "promote", "blueprints/pipe.yaml")  # no signing key here
    assert promote.returncode == 0, promote.stderr
    assert "fake pulumi up on stack pipe-prod" in promote.stdout
    # The record reached the remote, in its own commit, with staging's signed evidence.
    assert git(remote, "log", "-1", "--format=%s", "main") == "promote pipe: staging -> prod"
    record = json.loads(git(remote, "show", "main:promotions/pipe-prod.json"))
    assert record["evidence"] == outputs["evidence"] and record["nodes"] == 1

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


def test_the_workflow_runs_the_same_steps_and_is_hardened():
    doc = yaml.safe_load(WORKFLOW.read_text())
    jobs = doc["jobs"]
    runs = "\n".join(s.get("run", "") for job in jobs.values() for s in job["steps"])
    for step in ("$PIPELINE pr", "$PIPELINE staging", "$PIPELINE promote", "$PIPELINE drift"):
        assert step in runs
    pr = jobs["pull-request"]
    assert pr["steps"][0]["with"]["fetch-depth"] == 0  # a shallow clone lacks the base
    # Pull-request jobs: a read-only token and no secret anywhere in what they see.
    assert doc["permissions"] == {"contents": "read"} and pr["permissions"] == {"contents": "read"}
    assert "secrets." not in json.dumps(doc.get("env", {}))
    assert "secrets." not in json.dumps(pr) and "environment" not in pr
    assert "secrets." not in json.dumps(jobs["comment"])
    assert "actions/checkout" not in json.dumps(jobs["comment"])  # runs none of the PR's code
    # The signing key: only the staging deploy, on main, in its protected environment.
    signing = [name for name, job in jobs.items() if SIGNING_ENV in json.dumps(job)]
    assert signing == ["staging"]
    assert jobs["staging"]["environment"] == "staging"
    assert "refs/heads/main" in jobs["staging"]["if"] and "refs/heads/main" in jobs["promote"]["if"]
    assert jobs["promote"]["environment"] == "production"
    # rackform from the repository's own pin, never a name on an index.
    installs = [line for line in runs.splitlines() if "pip install" in line]
    assert installs and all(i.endswith("-r examples/gitops/requirements.txt") for i in installs)
    pins = [ln for ln in (ROOT / "examples/gitops/requirements.txt").read_text().splitlines()
            if ln and not ln.startswith("#")]  # fmt: skip
    assert pins == ["./tools/rackform-0.1.0-py3-none-any.whl[deploy]"]
    assert "${{ inputs." not in runs  # inputs reach scripts through env, never spliced in
    assert "smoke" not in SCRIPT.read_text().split("set -euo pipefail", 1)[1]
