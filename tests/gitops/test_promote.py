"""`rackform promote` in a real git repository, and the gate that holds at apply time:
`rackform up` (through a recording `pulumi` stand-in, said so in stand_ins.py) and the Pulumi
program itself refuse a promoted environment without a matching record."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pulumi
import pytest
import stand_ins
from gitrepo import PIPE, commit, git, make_remote

from rackform.blueprint import loader
from rackform.engine import prepare
from rackform.gitops import promote as promotion
from rackform.gitops.evidence import seal
from rackform.stack.offline import record_program

REPORT = {"checks": [{"name": "loss_drop", "status": "pass", "measured": 0.4, "expected": 0.2}]}


@pytest.fixture
def repo(tmp_path):
    _, work = make_remote(tmp_path, {"blueprints/pipe.yaml": PIPE})
    return work


def evidence(repo: Path, name: str = "ev.json", report=REPORT) -> Path:
    """A sealed report of staging at the repository's head (what `smoke --json` writes)."""
    plan = prepare(repo / "blueprints" / "pipe.yaml", "staging").plan
    path = repo.parent / name
    path.write_text(json.dumps(seal(report, plan=plan, commit=git(repo, "rev-parse", "HEAD"))))
    return path


@pytest.fixture
def env(tmp_path):
    bin_dir = tmp_path / "bin"
    stand_ins.install(bin_dir)
    return stand_ins.fake_pulumi.environ(bin_dir, tmp_path)


def promote(rackform, repo, ev, env, *extra):
    return rackform(
        "promote", "blueprints/pipe.yaml", "--from", "staging", "--to", "prod", "--evidence", ev,
        *extra, cwd=repo, env=env,
    )  # fmt: skip


RECORD = "promotions/pipe-prod.json"


def test_promote_records_and_commits_and_up_on_prod_needs_the_record(rackform, repo, env, tmp_path):
    up = rackform("up", "blueprints/pipe.yaml", "--env", "prod", cwd=repo, env=env)
    assert up.returncode == 2
    assert "environment prod takes this blueprint only by promotion from staging" in up.stderr
    assert "rackform promote blueprints/pipe.yaml --from staging --to prod" in up.stderr
    assert "up" not in stand_ins.operations(tmp_path)  # pulumi was never asked to update
    # staging needs no promotion: its `up` reaches pulumi.
    staging = rackform("up", "blueprints/pipe.yaml", "--env", "staging", cwd=repo, env=env)
    assert staging.returncode == 0, staging.stderr
    assert "fake pulumi up on stack pipe-staging" in staging.stdout

    ev = evidence(repo)
    proc = promote(rackform, repo, ev, env, "--commit")
    assert proc.returncode == 0, proc.stderr
    rec = json.loads((repo / RECORD).read_text())
    prod = prepare(repo / "blueprints" / "pipe.yaml", "prod").plan
    assert (rec["from"], rec["to"], rec["cluster"]) == ("staging", "prod", "pipe")
    assert rec["target_digest"] == prod.digest
    assert rec["promoted_by"] == "Pat Platform <pat@example.com>"
    assert rec["evidence"]["content"] == json.loads(ev.read_text())["evidence"]["content"]
    assert git(repo, "show", "--name-only", "--format=%s", "HEAD").splitlines() == [
        "promote pipe: staging -> prod",
        "",
        RECORD,
    ]
    assert git(repo, "status", "--porcelain") == ""

    head = git(repo, "rev-parse", "HEAD")
    again = promote(rackform, repo, ev, env, "--commit")
    assert again.returncode == 0 and "already promoted" in again.stdout
    assert git(repo, "rev-parse", "HEAD") == head  # a no-op: no second commit

    up = rackform("up", "blueprints/pipe.yaml", "--env", "prod", cwd=repo, env=env)
    assert up.returncode == 0, up.stderr
    assert "fake pulumi up on stack pipe-prod" in up.stdout


def test_what_may_change_after_a_promotion(rackform, repo, env):
    ev = evidence(repo)
    assert promote(rackform, repo, ev, env, "--commit").returncode == 0
    # prod's own override changed: prod's digest moves, up refuses until promoted again, and
    # staging's evidence still backs that promotion (staging did not change).
    commit(repo, "prod: more smoke steps", {"blueprints/pipe.yaml": PIPE.replace(
        "  prod: {}", "  prod: {validation: {smoke_steps: 20}}")})  # fmt: skip
    up = rackform("up", "blueprints/pipe.yaml", "--env", "prod", cwd=repo, env=env)
    assert up.returncode == 2 and "(the blueprint changed since)" in up.stderr
    assert promote(rackform, repo, ev, env, "--commit").returncode == 0
    assert (
        rackform("up", "blueprints/pipe.yaml", "--env", "prod", cwd=repo, env=env).returncode == 0
    )
    # Anything staging validated changed (the base): the old evidence no longer counts, and
    # the refused promotion writes nothing.
    commit(repo, "base: network interface", {"blueprints/pipe.yaml": PIPE.replace(
        "smoke_steps: 10", "smoke_steps: 11")})  # fmt: skip
    before = (repo / RECORD).read_bytes()
    proc = promote(rackform, repo, ev, env, "--commit")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "staging's digest at this commit is" in proc.stderr
    assert "validate staging again" in proc.stderr
    assert (repo / RECORD).read_bytes() == before and git(repo, "status", "--porcelain") == ""


def test_refused_promotions_write_nothing(rackform, repo, env):
    ev = evidence(repo)
    wrong = rackform(
        "promote", "blueprints/pipe.yaml", "--from", "dev", "--to", "prod", "--evidence", ev,
        cwd=repo, env=env,
    )  # fmt: skip
    assert wrong.returncode == 2
    assert wrong.stderr.startswith("blueprints/pipe.yaml:")  # located, at promotion.prod.from
    assert "prod is promoted from staging, not dev" in wrong.stderr
    failed = evidence(repo, "failed.json", {"checks": [{**REPORT["checks"][0], "status": "fail"}]})
    assert "the validation failed" in promote(rackform, repo, failed, env).stderr
    (repo / "blueprints" / "pipe.yaml").write_text(PIPE + "# edited\n")
    dirty = promote(rackform, repo, ev, env)
    assert dirty.returncode == 2 and "uncommitted changes" in dirty.stderr
    assert not (repo / "promotions").exists()


def test_the_blueprint_names_environments_that_exist(rackform, repo):
    bad = PIPE.replace("prod: {from: staging}", "prod: {from: stagin}")
    commit(repo, "typo", {"blueprints/pipe.yaml": bad})
    proc = rackform("validate", "blueprints/pipe.yaml", cwd=repo)
    line = next(i for i, t in enumerate(bad.splitlines(), 1) if "stagin}" in t)
    assert proc.returncode == 2
    assert f"blueprints/pipe.yaml:{line}:" in proc.stderr and "promotion.prod.from" in proc.stderr
    assert "prod cannot be promoted from 'stagin'" in proc.stderr
    inner = PIPE.replace("  prod: {}", "  prod: {promotion: {prod: {from: staging}}}")
    commit(repo, "nested", {"blueprints/pipe.yaml": inner})
    proc = rackform("validate", "blueprints/pipe.yaml", cwd=repo)
    assert "promotion is declared once, in the base blueprint" in proc.stderr


def test_a_bare_pulumi_up_runs_the_program_which_refuses_too(repo):
    """The program `pulumi up` runs (stacks/__main__.py -> program.main), under Pulumi's mocks
    (the engine is what this machine cannot run)."""
    from rackform.stack import program

    config = {"rackform:blueprint": str(repo / "blueprints" / "pipe.yaml"),
              "rackform:environment": "prod"}  # fmt: skip
    with pytest.raises(pulumi.RunError, match="only by promotion from staging"):
        record_program(lambda: program.main(repo), "pipe-prod", config)
    assert record_program(
        lambda: program.main(repo), "pipe-staging", {**config, "rackform:environment": "staging"}
    )  # staging builds


def _make(repo: Path, ev: Path, **kw):
    return promotion.promote(
        repo / "blueprints" / "pipe.yaml", "staging", "prod", ev, age=timedelta(hours=1), **kw
    )


def _failing_commits(repo: Path) -> None:
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'hook says no' >&2\nexit 1\n")
    hook.chmod(0o755)


def test_a_commit_that_fails_leaves_nothing_behind(repo):
    ev = evidence(repo)
    _failing_commits(repo)  # the record is written and staged, then the commit fails
    with pytest.raises(promotion.Refused, match="the promotion record was not committed"):
        _make(repo, ev, commit=True)
    assert not (repo / "promotions").exists()
    assert git(repo, "status", "--porcelain") == ""  # nothing staged either


def test_a_failed_commit_over_an_earlier_record_puts_it_back(repo):
    first = _make(repo, evidence(repo), commit=True)
    assert first.changed and first.commit == git(repo, "rev-parse", "HEAD")
    before = first.path.read_bytes()
    _failing_commits(repo)
    with pytest.raises(promotion.Refused):
        _make(repo, evidence(repo, "newer.json"), commit=True)  # new evidence: a new record
    assert first.path.read_bytes() == before
    assert git(repo, "status", "--porcelain") == ""


def test_a_write_that_fails_half_way_leaves_no_part(repo, monkeypatch):
    ev = evidence(repo)

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(promotion.os, "replace", full_disk)
    with pytest.raises(promotion.Refused, match=r"not written: .*No space left"):
        _make(repo, ev)
    assert not (repo / "promotions").exists()  # neither the record nor its temporary file


def test_the_blueprint_is_read_once(repo, monkeypatch):
    ev = evidence(repo)
    reads = []
    real = loader.read
    monkeypatch.setattr(loader, "read", lambda path: reads.append(path) or real(path))
    assert _make(repo, ev).changed
    assert len(reads) == 1  # base, staging and prod all come from one read
