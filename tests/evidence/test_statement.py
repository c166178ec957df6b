"""Signed validation evidence: what a verifier believes and what it refuses, each with its
one-line reason. The envelopes are made by the code the Validate stage runs (`attest`)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from promotion_world import NODE, PIPE, keypair, keys_file

from rackform.acceptance.cluster import merge_reports
from rackform.engine import prepare
from rackform.evidence import trust
from rackform.evidence.pin import pin_of
from rackform.evidence.signing import (
    SIGNING_ENV,
    SigningError,
    envelope,
    legacy_key_problem,
    load_signing_key,
)
from rackform.evidence.statement import (
    EvidenceError,
    attest,
    check,
    from_file,
    max_age,
    statement,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(hours=24)


@pytest.fixture
def world(tmp_path):
    bp = tmp_path / "pipe.yaml"
    bp.write_text(PIPE)
    staging, prod = prepare(bp, "staging").plan, prepare(bp, "prod").plan
    pem, key = keypair(tmp_path, "staging")
    _, prod_key = keypair(tmp_path, "prod")
    (tmp_path / "promotion-keys.yaml").write_text(
        keys_file([("staging-deploy", key, ["staging"]), ("prod-deploy", prod_key, ["prod"])])
    )
    keys = trust.load(tmp_path / "promotion-keys.yaml")
    return staging, prod, pem, keys, prod_key


def about(plan):
    return {"stack": plan.stack, "cluster": plan.name, "environment": plan.environment,
            "pin": pin_of(plan)}  # fmt: skip


def signed(plan, pem, hosts=("n1",), reports=None, at=NOW):
    reports = {h: NODE for h in hosts} if reports is None else reports
    report = merge_reports(list(hosts), reports, 0)  # the Validate stage's merge
    return attest(report, about(plan), list(hosts), now=at, environ={SIGNING_ENV: str(pem)})


def verify(env, plan, keys, *, age=DAY, now=NOW, nodes=(1, 1)):
    return check(env, keys, plan, now=now, age=age, expected_nodes=nodes)


def refused(env, plan, keys, **kw) -> str:
    with pytest.raises(EvidenceError) as exc:
        verify(env, plan, keys, **kw)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def reencode(env, edit):
    """The envelope with its statement edited by hand (the signature kept)."""
    st = json.loads(base64.b64decode(env["payload"]))
    edit(st)
    body = json.dumps(st, sort_keys=True, separators=(",", ":")).encode()
    return {**env, "payload": base64.b64encode(body).decode()}


def test_the_stages_signed_statement_of_the_source_digest_is_accepted(world):
    staging, _, pem, keys, _ = world
    proven = verify(signed(staging, pem), staging, keys)
    assert proven.nodes == 1 and proven.pin["blueprint"] == staging.digest
    assert proven.subject.startswith("sha256:") and proven.validated_at == NOW.isoformat()


def test_no_signature_no_promotion_and_only_keys_listed_for_the_environment(world, tmp_path):
    staging, _, pem, keys, prod_key = world
    unsigned = attest(merge_reports(["n1"], {"n1": NODE}, 0), about(staging), ["n1"], now=NOW,
                      environ={})  # fmt: skip
    assert "unsigned" in refused(unsigned, staging, keys)
    stranger, _ = keypair(tmp_path, "stranger")
    msg = refused(signed(staging, stranger), staging, keys)
    assert "is not in promotion-keys.yaml" in msg
    # prod's deploy key is listed, for prod only: it cannot vouch for staging.
    by_prod = envelope(json.loads(base64.b64decode(signed(staging, pem)["payload"])), prod_key)
    assert "may sign for prod, not staging" in refused(by_prod, staging, keys)


def test_every_edit_of_a_signed_statement_is_refused(world):
    staging, _, pem, keys, _ = world
    env = signed(staging, pem)
    nodes = reencode(env, lambda st: st["predicate"]["nodes"].update(expected=["n1", "n9"]))
    assert "does not verify" in refused(nodes, staging, keys)
    check_ = reencode(env, lambda st: st["predicate"]["report"]["checks"][0].update(measured=9))
    assert "does not verify" in refused(check_, staging, keys)
    digest = reencode(env, lambda st: st["subject"][0]["digest"].update(sha256="0" * 64))
    assert "does not verify" in refused(digest, staging, keys)
    sig = env["signatures"][0]
    flipped = base64.b64encode(bytes([base64.b64decode(sig["sig"])[0] ^ 1])
                               + base64.b64decode(sig["sig"])[1:]).decode()  # fmt: skip
    assert "does not verify" in refused({**env, "signatures": [{**sig, "sig": flipped}]},
                                        staging, keys)  # fmt: skip
    other_id = {**sig, "keyid": "ed25519:" + "0" * 32}
    assert "is not in promotion-keys.yaml" in refused({**env, "signatures": [other_id]},
                                                      staging, keys)  # fmt: skip


def test_signed_but_not_about_this_validation(world, tmp_path):
    staging, prod, pem, keys, _ = world
    # prod's own statement is not staging's, whichever key signed it.
    assert "may sign for prod, not staging" in refused(
        signed(prod, tmp_path / "prod.pem"), staging, keys
    )
    assert "validated environment 'prod', not 'staging'" in refused(
        signed(prod, pem), staging, keys
    )
    failing = {"n1": {"checks": [{**NODE["checks"][0], "status": "fail"}]}}
    assert "the validation failed (n1/loss_drop: measured" in refused(
        signed(staging, pem, reports=failing), staging, keys
    )
    # A node that sent nothing: the stage's node_reports check fails, and it is not counted.
    silent = signed(staging, pem, hosts=("n1",), reports={})
    assert "the validation failed (node_reports: measured 0" in refused(silent, staging, keys)
    assert "validated 1 nodes, the blueprint has 2" in refused(
        signed(staging, pem), staging, keys, nodes=(2, 2)
    )
    changed = tmp_path / "changed.yaml"
    changed.write_text(PIPE.replace("smoke_steps: 10", "smoke_steps: 12"))
    newer = prepare(changed, "staging").plan
    assert f"staging's digest at this commit is {newer.digest}" in refused(
        signed(staging, pem), newer, keys
    )
    # A statement signed by the right key that says it came from elsewhere, or whose subject
    # is not its pin: the verifier decides what counts, not the producer.
    st = json.loads(base64.b64decode(signed(staging, pem)["payload"]))
    st["predicate"]["producer"] = "rackform smoke"
    key = load_signing_key({SIGNING_ENV: str(pem)})
    assert "a `rackform smoke` report is not evidence" in refused(envelope(st, key), staging, keys)
    st = statement(merge_reports(["n1"], {"n1": NODE}, 0), about(staging), ["n1"], NOW)
    st["predicate"]["pin"]["rackform"] = "9.9.9"
    assert "subject is not the digest of the pin" in refused(envelope(st, key), staging, keys)


def test_time_is_enforced_both_ways(world):
    staging, _, pem, keys, _ = world
    ahead = signed(staging, pem, at=NOW + timedelta(days=3650))
    assert "in the future (more than the 5 min clock skew allowed)" in refused(
        ahead, staging, keys, age=timedelta(seconds=1)
    )
    assert "in the future" in refused(ahead, staging, keys, age=None)  # at `up` too
    verify(signed(staging, pem, at=NOW + timedelta(minutes=4)), staging, keys)  # within skew
    old = signed(staging, pem, at=NOW - timedelta(hours=30))
    assert "stale: validated 30.0 h ago, older than --max-age 24 h" in refused(old, staging, keys)


def test_a_smoke_report_is_not_evidence(tmp_path):
    smoke = tmp_path / "smoke.json"
    smoke.write_text(json.dumps({"producer": "rackform smoke", "checks": [NODE["checks"][0]]}))
    with pytest.raises(EvidenceError, match="a `rackform smoke` report is not evidence"):
        from_file(smoke)
    (tmp_path / "x.json").write_text("not json")
    with pytest.raises(EvidenceError, match="not evidence \\(not JSON"):
        from_file(tmp_path / "x.json")


def test_keys_and_the_retired_symmetric_key(tmp_path):
    assert "RACKFORM_EVIDENCE_KEY is no longer accepted" in legacy_key_problem(
        {"RACKFORM_EVIDENCE_KEY": "s3cret"}
    )
    assert legacy_key_problem({}) is None
    (tmp_path / "bad.pem").write_text("-----BEGIN PRIVATE KEY-----\nnope\n")
    with pytest.raises(SigningError, match="not an unencrypted PEM private key"):
        load_signing_key({SIGNING_ENV: str(tmp_path / "bad.pem")})
    with pytest.raises(SigningError, match="cannot be read"):
        load_signing_key({SIGNING_ENV: str(tmp_path / "missing.pem")})
    assert load_signing_key({}) is None
    (tmp_path / "k.yaml").write_text(
        "keys:\n  - {name: x, environments: [staging], public_key: no}\n"
    )
    with pytest.raises(SigningError, match=r"k.yaml: keys\[0\].public_key: not a PEM public key"):
        trust.load(tmp_path / "k.yaml")
    with pytest.raises(SigningError, match="no such file"):
        trust.load(tmp_path / "none.yaml")


def test_max_age_is_a_number_and_a_unit():
    assert max_age("90m") == timedelta(minutes=90) and max_age("2d") == timedelta(days=2)
    with pytest.raises(EvidenceError, match="--max-age 'soon'"):
        max_age("soon")
