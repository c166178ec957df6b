"""Sealed validation evidence: what `rackform promote` believes and what it refuses."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from rackform.engine import prepare
from rackform.gitops.evidence import KEY_ENV, EvidenceError, max_age, seal, verify

from gitrepo import PIPE  # isort: skip

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
REPORT = {
    "ok": True,
    "checks": [
        {"name": "node_count", "status": "pass", "measured": 1, "expected": 1},
        {"name": "loss_drop", "status": "pass", "measured": 0.4, "expected": 0.2},
        {"name": "nccl_version", "status": "not-run", "measured": None, "expected": None},
    ],
}


@pytest.fixture
def plans(tmp_path):
    bp = tmp_path / "pipe.yaml"
    bp.write_text(PIPE)
    return prepare(bp, "staging").plan, prepare(bp, "prod").plan


def sealed(tmp_path, plan, report=REPORT, at=NOW, environ=None, name="ev.json"):
    path = tmp_path / name
    path.write_text(
        json.dumps(seal(report, plan=plan, commit="c0ffee", now=at, environ=environ or {}))
    )
    return path


def refused(path, plan, **kw) -> str:
    kw.setdefault("age", timedelta(hours=24))
    kw.setdefault("now", NOW)
    kw.setdefault("environ", {})
    with pytest.raises(EvidenceError) as exc:
        verify(path, plan, **kw)
    return str(exc.value)


def test_a_passing_report_of_the_source_digest_is_accepted(tmp_path, plans):
    staging, _ = plans
    ev = verify(sealed(tmp_path, staging), staging, age=timedelta(hours=1), now=NOW, environ={})
    assert ev.commit == "c0ffee" and not ev.signed and ev.content.startswith("sha256:")


def test_hand_edited_failed_stale_and_foreign_reports_are_refused(tmp_path, plans):
    staging, prod = plans
    path = sealed(tmp_path, staging)
    doc = json.loads(path.read_text())
    doc["checks"][0]["measured"] = 2
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    assert "edited after it was sealed" in refused(edited, staging)

    failing = {**REPORT, "checks": [{**REPORT["checks"][0], "status": "fail"}]}
    assert "the validation failed (failed checks: node_count)" in refused(
        sealed(tmp_path, staging, failing, name="f.json"), staging
    )
    nothing = {**REPORT, "checks": [REPORT["checks"][2]]}
    assert "no check passed" in refused(sealed(tmp_path, staging, nothing, name="n.json"), staging)

    old = sealed(tmp_path, staging, at=NOW - timedelta(hours=30), name="old.json")
    assert "stale: validated 30.0 h ago, older than --max-age 24 h" in refused(old, staging)

    # prod's report is not staging's; another digest (the blueprint changed) neither.
    assert "validated environment 'prod', not 'staging'" in refused(
        sealed(tmp_path, prod, name="p.json"), staging
    )
    other = tmp_path / "other.yaml"
    other.write_text(PIPE.replace("name: pipe", "name: other"))
    foreign = prepare(other, "staging").plan
    assert "validated cluster 'other', not 'pipe'" in refused(
        sealed(tmp_path, foreign, name="o.json"), staging
    )
    changed = tmp_path / "changed.yaml"
    changed.write_text(PIPE.replace("smoke_steps: 10", "smoke_steps: 12"))
    newer = prepare(changed, "staging").plan
    msg = refused(path, newer)
    assert f"at this commit is {newer.digest}: validate staging again" in msg


def test_files_that_are_not_reports(tmp_path, plans):
    staging, _ = plans
    (tmp_path / "x.json").write_text("not json")
    assert "not a validation report (not JSON" in refused(tmp_path / "x.json", staging)
    (tmp_path / "y.json").write_text('{"cluster": "pipe"}')
    assert "no `checks` list" in refused(tmp_path / "y.json", staging)
    (tmp_path / "z.json").write_text(json.dumps(REPORT))
    assert "not sealed evidence" in refused(tmp_path / "z.json", staging)
    assert "no such file" in refused(tmp_path / "missing.json", staging)


def test_with_a_key_configured_only_signed_reports_pass(tmp_path, plans):
    staging, _ = plans
    key = {KEY_ENV: "s3cret-signing-key"}
    signed = sealed(tmp_path, staging, environ=key, name="signed.json")
    assert "s3cret" not in signed.read_text()
    assert verify(signed, staging, age=timedelta(hours=1), now=NOW, environ=key).signed
    unsigned = sealed(tmp_path, staging, name="unsigned.json")
    assert "unsigned" in refused(unsigned, staging, environ=key)
    assert "signature does not match" in refused(signed, staging, environ={KEY_ENV: "other"})
    # Re-sealing an edited report without the key cannot forge the signature.
    doc = json.loads(signed.read_text())
    doc["checks"][0]["measured"] = 5
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(seal(doc, plan=staging, now=NOW, environ={})))
    assert "unsigned" in refused(forged, staging, environ=key)


def test_max_age_is_a_number_and_a_unit():
    assert max_age("90m") == timedelta(minutes=90) and max_age("2d") == timedelta(days=2)
    with pytest.raises(EvidenceError, match="--max-age 'soon'"):
        max_age("soon")
