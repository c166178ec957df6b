"""`rackform promote` in a real git repository, and the gate that holds at apply time:
`rackform up` (through a recording `pulumi` stand-in, said so in stand_ins.py) and the Pulumi
program itself verify the record's signed evidence.

The source's evidence is made the honest way: staging's `up` runs the program under Pulumi's
mocks with the real Validate provider (staged.py says where the mocks stand in for the engine),
signed with the staging deploy's key; its stack outputs are then what the `pulumi` stand-in
answers when `promote` reads them through the Automation API."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pulumi
import pytest
import staged
import stand_ins
from gitrepo import commit, git, make_remote
from promotion_world import NODE, PIPE, keypair, keys_file

from rackform.blueprint import loader
from rackform.engine import prepare
from rackform.evidence import pin as pins
from rackform.evidence.signing import SIGNING_ENV
from rackform.gitops import promote as promotion
from rackform.stack.offline import record_program
from rackform.stack.promotion import PromotionRequired, require_promotion

RECORD = "promotions/pipe-prod.json"
BP = "blueprints/pipe.yaml"


@pytest.fixture
def keys(tmp_path):
    where = tmp_path / "secrets"  # outside the repository: the deploy's secret
    where.mkdir()
    return keypair(where, "staging")


@pytest.fixture
def repo(tmp_path, keys):
    _, key = keys
    files = {BP: PIPE, "promotion-keys.yaml": keys_file([("staging", key, ["staging"])])}
    _, work = make_remote(tmp_path, files)
    return work


@pytest.fixture
def env(tmp_path):
    bin_dir = tmp_path / "bin"
    stand_ins.install(bin_dir)
    return stand_ins.fake_pulumi.environ(bin_dir, tmp_path)


def staging_up(repo: Path, tmp_path: Path, pem: Path | None, monkeypatch, **kw) -> dict:
    """Staging's `up` with (or without) the deploy's signing key; its outputs recorded where
    the `pulumi` stand-in answers `stack output` from."""
    if pem is not None:
        monkeypatch.setenv(SIGNING_ENV, str(pem))
    try:
        outputs = staged.up(repo, repo / BP, "staging", **kw)
    finally:
        monkeypatch.delenv(SIGNING_ENV, raising=False)
    stand_ins.fake_pulumi.set_outputs(tmp_path, "pipe-staging", outputs)
    return outputs


def promote(rackform, repo, env, *extra):
    return rackform("promote", BP, "--from", "staging", "--to", "prod", *extra, cwd=repo, env=env)


def up(rackform, repo, env, which="prod"):
    return rackform("up", BP, "--env", which, cwd=repo, env=env)


def gate(repo: Path) -> str:
    """What `up` and the program say about the record now ("" when it is accepted)."""
    try:
        require_promotion(prepare(repo / BP, "prod").plan, repo, prepare)
    except PromotionRequired as exc:
        assert "\n" not in str(exc)
        return str(exc)
    return ""


def program_up(repo: Path, env: str):
    """The program a bare `pulumi up` runs, under Pulumi's mocks."""
    from rackform.stack import program

    config = {"rackform:blueprint": str(repo / BP), "rackform:environment": env}
    return record_program(lambda: program.main(repo), f"pipe-{env}", config)


def test_staging_up_its_signed_evidence_promoted_then_prod_up(
    rackform, repo, env, tmp_path, keys, monkeypatch
):
    refused = up(rackform, repo, env)
    assert refused.returncode == 2
    assert "environment prod takes this blueprint only by promotion from staging" in refused.stderr
    assert "up" not in stand_ins.operations(tmp_path)  # pulumi was never asked to update
    assert up(rackform, repo, env, "staging").returncode == 0  # staging is not gated

    outputs = staging_up(repo, tmp_path, keys[0], monkeypatch)
    assert outputs["validation_passed"] is True and outputs["evidence"]["signatures"]
    proc = promote(rackform, repo, env, "--commit")  # no signing key here: only public keys
    assert proc.returncode == 0, proc.stderr
    assert "promoted staging -> prod" in proc.stdout
    rec = json.loads((repo / RECORD).read_text())
    prod = prepare(repo / BP, "prod").plan
    staging = prepare(repo / BP, "staging").plan
    assert (rec["format"], rec["from"], rec["to"], rec["nodes"]) == (
        "rackform-promotion/2", "staging", "prod", 1)  # fmt: skip
    assert rec["target_digest"] == prod.digest and rec["source_digest"] == staging.digest
    assert rec["evidence"] == outputs["evidence"]  # the stack's own signed statement
    assert rec["promoted_by"] == "Pat Platform <pat@example.com>"
    assert git(repo, "show", "--name-only", "--format=%s", "HEAD").splitlines() == [
        "promote pipe: staging -> prod", "", RECORD]  # fmt: skip
    head = git(repo, "rev-parse", "HEAD")
    again = promote(rackform, repo, env, "--commit")
    assert again.returncode == 0 and "already promoted" in again.stdout
    assert git(repo, "rev-parse", "HEAD") == head  # a no-op: no second commit

    accepted = up(rackform, repo, env)
    assert accepted.returncode == 0, accepted.stderr
    assert "fake pulumi up on stack pipe-prod" in accepted.stdout
    assert program_up(repo, "prod")  # a bare `pulumi up` verifies the same record


def forge(repo: Path, edit) -> None:
    rec = json.loads((repo / RECORD).read_text())
    edit(rec)
    (repo / RECORD).write_text(json.dumps(rec))


def statement_edit(edit):
    def change(rec):
        env = rec["evidence"]
        st = json.loads(base64.b64decode(env["payload"]))
        edit(st)
        env["payload"] = base64.b64encode(json.dumps(st).encode()).decode()

    return change


def test_hand_written_and_edited_records_are_refused(rackform, repo, env, tmp_path, keys,
                                                    monkeypatch):  # fmt: skip
    prod = prepare(repo / BP, "prod").plan
    # The record that used to pass: no evidence at all.
    (repo / "promotions").mkdir()
    (repo / RECORD).write_text(json.dumps({"from": "staging", "to": "prod",
                                           "target_digest": prod.digest}))  # fmt: skip
    assert "not a record `rackform promote` writes" in gate(repo)
    proc = up(rackform, repo, env)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "not a record `rackform promote` writes" in proc.stderr
    with pytest.raises(pulumi.RunError, match="not a record `rackform promote` writes"):
        program_up(repo, "prod")

    (repo / RECORD).unlink()
    staging_up(repo, tmp_path, keys[0], monkeypatch)
    assert promote(rackform, repo, env).returncode == 0
    good = (repo / RECORD).read_text()
    assert gate(repo) == ""
    cases = [
        (statement_edit(lambda st: st["predicate"]["nodes"].update(expected=["n1", "n2"])),
         "does not verify"),
        (statement_edit(lambda st: st["predicate"]["pin"].update(blueprint=prod.digest)),
         "does not verify"),
        (lambda r: r["evidence"]["signatures"][0].update(sig=base64.b64encode(b"x" * 64).decode()),
         "does not verify"),
        (lambda r: r["evidence"]["signatures"][0].update(keyid="ed25519:" + "1" * 32),
         "is not in promotion-keys.yaml"),
        (lambda r: r["evidence"].update(signatures=[]), "unsigned"),
        (lambda r: r.update(target_digest="sha256:" + "0" * 64), "promoted digest sha256:000"),
        (lambda r: r.update(source_digest="sha256:" + "0" * 64), "the record names subject"),
        (lambda r: r.update({"from": "dev"}), "promotes dev -> prod, but the blueprint declares"),
    ]  # fmt: skip
    for edit, why in cases:
        (repo / RECORD).write_text(good)
        forge(repo, edit)
        assert why in gate(repo), why
    (repo / RECORD).write_text(good)
    assert gate(repo) == ""


def test_unsigned_smoke_and_legacy_evidence_is_refused(rackform, repo, env, tmp_path, keys,
                                                      monkeypatch):  # fmt: skip
    staging_up(repo, tmp_path, None, monkeypatch)  # a deploy without the signing key
    proc = promote(rackform, repo, env)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "unsigned: the source deploy ran without RACKFORM_EVIDENCE_SIGNING_KEY" in proc.stderr
    smoke = tmp_path / "smoke.json"
    smoke.write_text(json.dumps({"producer": "rackform smoke", "checks": [
        {"name": "loss_drop", "status": "pass"}]}))  # fmt: skip
    proc = promote(rackform, repo, env, "--evidence", smoke)
    assert proc.returncode == 2 and "a `rackform smoke` report is not evidence" in proc.stderr
    legacy = {**env, "RACKFORM_EVIDENCE_KEY": "s3cret"}
    for proc in (promote(rackform, repo, legacy), up(rackform, repo, legacy, "staging")):
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
        assert "RACKFORM_EVIDENCE_KEY is no longer accepted" in proc.stderr
    # A stack that never ran this rackform's Validate stage has no evidence output.
    stand_ins.fake_pulumi.set_outputs(tmp_path, "pipe-staging", {"validation": {}})
    assert "stack pipe-staging has no `evidence` output" in promote(rackform, repo, env).stderr
    assert not (repo / "promotions").exists()


def test_a_failed_or_partial_validation_is_not_promoted(rackform, repo, env, tmp_path, keys,
                                                       monkeypatch):  # fmt: skip
    staging_up(repo, tmp_path, keys[0], monkeypatch, work=staged.NodeWork({}))  # n1 said nothing
    proc = promote(rackform, repo, env)
    assert proc.returncode == 2 and "the validation failed (node_reports: measured 0" in proc.stderr
    assert not (repo / "promotions").exists()


def make(repo: Path, outputs: dict, **kw):
    kw.setdefault("age", timedelta(hours=1))
    return promotion.promote(repo / BP, "staging", "prod", outputs=lambda plan: outputs, **kw)


def test_evidence_from_the_future_and_stale_evidence(repo, tmp_path, keys, monkeypatch):
    outputs = staging_up(repo, tmp_path, keys[0], monkeypatch)
    now = datetime.now(UTC)
    with pytest.raises(promotion.Refused, match="in the future"):
        make(repo, outputs, now=now - timedelta(days=1))
    with pytest.raises(promotion.Refused, match=r"stale: validated 2\.0 h ago"):
        make(repo, outputs, now=now + timedelta(hours=2))
    assert not (repo / "promotions").exists()


def test_prod_runs_what_staging_validated_or_up_says_what_differs(repo, tmp_path, keys,
                                                                  monkeypatch):  # fmt: skip
    make(repo, staging_up(repo, tmp_path, keys[0], monkeypatch))
    assert gate(repo) == ""
    monkeypatch.setattr(pins, "__version__", "9.9.9")  # a different rackform at prod's `up`
    msg = gate(repo)
    assert "prod would run other bits than staging validated: rackform 9.9.9 (validated: " in msg
    monkeypatch.undo()
    # The roles and validators shipped to nodes: the Configure stage's own hash.
    from rackform.evidence import shipped

    monkeypatch.setattr(shipped, "roles_hash", lambda c: "sha256:other-roles")
    assert "roles sha256:other-roles (validated: sha256:" in gate(repo)


def test_what_may_change_after_a_promotion(repo, tmp_path, keys, monkeypatch):
    outputs = staging_up(repo, tmp_path, keys[0], monkeypatch)
    make(repo, outputs, commit=True)
    # prod's own override changed: prod's digest moves, up refuses until promoted again, and
    # staging's evidence still backs that promotion (staging did not change).
    commit(repo, "prod: more smoke steps", {BP: PIPE.replace(
        "  prod: {}", "  prod: {validation: {smoke_steps: 20}}")})  # fmt: skip
    assert "(the blueprint changed since)" in gate(repo)
    assert make(repo, outputs, commit=True).changed and gate(repo) == ""
    # Anything staging validated changed (the base): its evidence no longer counts.
    commit(repo, "base", {BP: PIPE.replace("smoke_steps: 10", "smoke_steps: 11")})
    before = (repo / RECORD).read_bytes()
    with pytest.raises(promotion.Refused, match=r"staging.s digest at this commit is .*`rackform up "
                       r"--env staging` again"):  # fmt: skip
        make(repo, outputs, commit=True)
    assert (repo / RECORD).read_bytes() == before and git(repo, "status", "--porcelain") == ""
    assert "(the blueprint changed since)" in gate(repo)  # and `up` on prod stops too


def test_re_pointing_a_rule_needs_new_evidence(repo, tmp_path, keys, monkeypatch):
    outputs = staging_up(repo, tmp_path, keys[0], monkeypatch)
    rules = PIPE.replace("  prod: {}", "  prod: {}\n  qa: {}").replace(
        "prod: {from: staging}", "prod: {from: staging}\n  qa: {from: staging}"
    )
    commit(repo, "a qa environment", {BP: rules})
    # The rules are in the pin: staging validated under other rules.
    with pytest.raises(promotion.Refused, match="staging changed since it was validated: "
                       "promotion"):  # fmt: skip
        make(repo, outputs)


def test_refused_promotions_write_nothing(rackform, repo, env, tmp_path, keys, monkeypatch):
    staging_up(repo, tmp_path, keys[0], monkeypatch)
    wrong = rackform("promote", BP, "--from", "dev", "--to", "prod", cwd=repo, env=env)
    assert wrong.returncode == 2
    assert wrong.stderr.startswith(f"{BP}:")  # located, at promotion.prod.from
    assert "prod is promoted from staging, not dev" in wrong.stderr
    (repo / BP).write_text(PIPE + "# edited\n")
    dirty = promote(rackform, repo, env)
    assert dirty.returncode == 2 and "uncommitted changes" in dirty.stderr
    assert not (repo / "promotions").exists()


def test_the_blueprint_names_environments_that_exist(rackform, repo):
    bad = PIPE.replace("prod: {from: staging}", "prod: {from: stagin}")
    commit(repo, "typo", {BP: bad})
    proc = rackform("validate", BP, cwd=repo)
    line = next(i for i, t in enumerate(bad.splitlines(), 1) if "stagin}" in t)
    assert proc.returncode == 2
    assert f"{BP}:{line}:" in proc.stderr and "promotion.prod.from" in proc.stderr
    assert "prod cannot be promoted from 'stagin'" in proc.stderr
    inner = PIPE.replace("  prod: {}", "  prod: {promotion: {prod: {from: staging}}}")
    commit(repo, "nested", {BP: inner})
    proc = rackform("validate", BP, cwd=repo)
    assert "promotion is declared once, in the base blueprint" in proc.stderr


def test_a_bare_pulumi_up_runs_the_program_which_refuses_too(repo):
    with pytest.raises(pulumi.RunError, match="only by promotion from staging"):
        program_up(repo, "prod")
    assert program_up(repo, "staging")  # staging builds


def _failing_commits(repo: Path) -> None:
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'hook says no' >&2\nexit 1\n")
    hook.chmod(0o755)


def test_a_commit_that_fails_leaves_nothing_behind(repo, tmp_path, keys, monkeypatch):
    outputs = staging_up(repo, tmp_path, keys[0], monkeypatch)
    _failing_commits(repo)  # the record is written and staged, then the commit fails
    with pytest.raises(promotion.Refused, match="the promotion record was not committed"):
        make(repo, outputs, commit=True)
    assert not (repo / "promotions").exists()
    assert git(repo, "status", "--porcelain") == ""  # nothing staged either


def test_a_failed_commit_over_an_earlier_record_puts_it_back(repo, tmp_path, keys, monkeypatch):
    first = make(repo, staging_up(repo, tmp_path, keys[0], monkeypatch), commit=True)
    assert first.changed and first.commit == git(repo, "rev-parse", "HEAD")
    before = first.path.read_bytes()
    _failing_commits(repo)
    again = {"n1": {"checks": [{**NODE["checks"][0], "measured": 0.5}]}}
    newer = staging_up(repo, tmp_path, keys[0], monkeypatch, work=staged.NodeWork(again))
    with pytest.raises(promotion.Refused):
        make(repo, newer, commit=True)
    assert first.path.read_bytes() == before
    assert git(repo, "status", "--porcelain") == ""


def test_a_write_that_fails_half_way_leaves_no_part(repo, tmp_path, keys, monkeypatch):
    outputs = staging_up(repo, tmp_path, keys[0], monkeypatch)

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(promotion.os, "replace", full_disk)
    with pytest.raises(promotion.Refused, match=r"not written: .*No space left"):
        make(repo, outputs)
    assert not (repo / "promotions").exists()  # neither the record nor its temporary file


def test_the_blueprint_is_read_once(repo, tmp_path, keys, monkeypatch):
    outputs = staging_up(repo, tmp_path, keys[0], monkeypatch)
    reads = []
    real = loader.read
    monkeypatch.setattr(loader, "read", lambda path: reads.append(path) or real(path))
    assert make(repo, outputs).changed
    assert len(reads) == 1  # base, staging and prod all come from one read


def test_the_envelope_saved_from_the_stack_is_the_same_evidence(repo, tmp_path, keys,
                                                               monkeypatch):  # fmt: skip
    """`--evidence FILE`: `pulumi stack output evidence --json` saved, for a promote job that
    does not reach the state backend; verified exactly as the output itself."""
    outputs = staging_up(repo, tmp_path, keys[0], monkeypatch)
    saved = tmp_path / "evidence.json"
    saved.write_text(json.dumps(outputs["evidence"]))
    done = promotion.promote(repo / BP, "staging", "prod", evidence=saved, age=timedelta(hours=1))
    assert done.changed and gate(repo) == ""
    rec = json.loads(done.path.read_text())
    assert rec["evidence"] == outputs["evidence"]
    # The old sealed report is a smoke report by another name: refused.
    saved.write_text(json.dumps({"checks": [], "evidence": {"format": "rackform-evidence/1"}}))
    with pytest.raises(promotion.Refused, match="a `rackform smoke` report is not evidence"):
        promotion.promote(repo / BP, "staging", "prod", evidence=saved, age=timedelta(hours=1))


def test_rackform_up_and_a_bare_pulumi_up_refuse_alike_through_one_gate(
    rackform, repo, env, tmp_path, monkeypatch
):
    # The same fault, the same line: the CLI's check before it calls Pulumi and the program's
    # own (another process, all a bare `pulumi up` runs) are one function.
    broken = tmp_path / "broken.pem"
    broken.write_text("not a key\n")
    faults = [
        ("prod", {}),  # no promotion record
        ("staging", {"RACKFORM_EVIDENCE_KEY": "s3cret"}),  # the retired key
        ("staging", {SIGNING_ENV: str(broken)}),  # a signing key that cannot be read
    ]
    for which, extra in faults:
        proc = up(rackform, repo, {**env, **extra}, which)
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        for key, value in extra.items():
            monkeypatch.setenv(key, value)
        try:
            with pytest.raises(pulumi.RunError) as err:
                program_up(repo, which)
        finally:
            for key in extra:
                monkeypatch.delenv(key)
        # (the CLI names the file as given, relative; the program as its stack config does)
        same = f"rackform: {err.value}".replace(f"{repo}/", "")
        assert line.replace(f"{repo}/", "") == same and line.endswith("; nothing was created")
        assert "up" not in stand_ins.operations(tmp_path)
