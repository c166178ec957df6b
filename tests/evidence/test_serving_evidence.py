"""An inference cluster is promoted on its serving smoke job's evidence, as a training cluster
is on its smoke job's: attempts to promote without it, each refused with its one-line reason.
The envelopes are made by the code the Validate stage runs (`merge_reports`, `attest`)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from promotion_world import HOSTS, NODE, SERVE, keypair, keys_file, served

from rackform.acceptance.cluster import merge_reports
from rackform.engine import prepare
from rackform.evidence import trust
from rackform.evidence.pin import pin_of
from rackform.evidence.signing import SIGNING_ENV
from rackform.evidence.statement import EvidenceError, attest, check

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
DAY = timedelta(hours=24)


@pytest.fixture
def world(tmp_path):
    bp = tmp_path / "chat-serve-a.yaml"
    bp.write_text(SERVE)
    staging = prepare(bp, "staging").plan
    pem, key = keypair(tmp_path, "staging")
    (tmp_path / "promotion-keys.yaml").write_text(keys_file([("staging-deploy", key, ["staging"])]))
    return staging, pem, trust.load(tmp_path / "promotion-keys.yaml")


def signed(plan, pem, reports, *, cluster=None, at=NOW):
    about = {"stack": plan.stack, "cluster": cluster or plan.name,
             "environment": plan.environment, "pin": pin_of(plan)}  # fmt: skip
    report = merge_reports(list(HOSTS), reports, 0)  # the Validate stage's merge
    return attest(report, about, list(HOSTS), now=at, environ={SIGNING_ENV: str(pem)})


def refused(env, plan, keys, age=DAY) -> str:
    with pytest.raises(EvidenceError) as exc:
        check(env, keys, plan, now=NOW, age=age, expected_nodes=plan.node_range)
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_the_serving_smoke_jobs_evidence_promotes_with_what_it_measured(world):
    staging, pem, keys = world
    reports = {"srv-01": served(300.0, cost=0.99), "srv-02": served(280.0, cost=1.05)}
    proven = check(signed(staging, pem, reports), keys, staging, now=NOW, age=DAY,
                   expected_nodes=staging.node_range)  # fmt: skip
    assert proven.nodes == 2
    s = proven.serving
    assert (s["decode_tokens_per_s"], s["cost_per_million_output_tokens"]) == (290.0, 1.02)
    assert s["cost_from"] == "the serving smoke job's figure"
    # A job that could not price the node: the plan's price over the measured rate,
    # $1.063 / (290 x 3600) x 1e6 = $1.018 per million output tokens.
    bare = {h: served(r) for h, r in zip(HOSTS, (300.0, 280.0), strict=True)}
    s = check(signed(staging, pem, bare), keys, staging, now=NOW, age=DAY,
              expected_nodes=staging.node_range).serving  # fmt: skip
    assert s["cost_per_million_output_tokens"] == pytest.approx(1.0182, abs=1e-4)
    assert s["cost_from"] == "the measured rate at the plan's node price"


def test_a_training_jobs_evidence_does_not_promote_an_inference_blueprint(world):
    staging, pem, keys = world
    # Every check passed, on every node: but they are the training smoke job's.
    training = {h: NODE for h in HOSTS}
    msg = refused(signed(staging, pem, training), staging, keys)
    assert "no serving smoke job in the report (no decode_tokens_per_s check)" in msg
    # The read-only serving checks alone prove hardware, not serving.
    hardware = {h: {"checks": [served(1.0)["checks"][0]]} for h in HOSTS}
    assert "no serving smoke job" in refused(signed(staging, pem, hardware), staging, keys)


def test_a_serving_check_that_did_not_run_or_failed_does_not_promote(world):
    staging, pem, keys = world
    not_run = {"srv-01": served(300.0), "srv-02": served(0.0, status="not-run")}
    msg = refused(signed(staging, pem, not_run), staging, keys)
    assert (
        msg == "evidence: the serving smoke job's decode_tokens_per_s did not pass on srv-02"
        " (not-run: the model did not load)"
    )
    failed = {"srv-01": served(300.0), "srv-02": served(120.0, status="fail")}
    msg = refused(signed(staging, pem, failed), staging, keys)
    assert "the validation failed (srv-02/decode_tokens_per_s: measured 120.0 tokens/s" in msg


def test_one_nodes_report_cannot_vouch_for_another(world):
    staging, pem, keys = world
    # srv-02 ran no job; srv-01's report names a check as srv-02's. The merge files every
    # check under the host that sent it, so srv-02 still has none.
    forged = served(300.0)
    forged["checks"].append({**forged["checks"][1], "name": "srv-02/decode_tokens_per_s"})
    reports = {"srv-01": forged, "srv-02": {"checks": [served(1.0)["checks"][0]]}}
    msg = refused(signed(staging, pem, reports), staging, keys)
    assert msg == "evidence: no serving smoke job's decode_tokens_per_s from srv-02"


def test_another_clusters_stale_or_tampered_evidence_does_not_promote(world):
    staging, pem, keys = world
    good = {h: served(300.0) for h in HOSTS}
    other = signed(staging, pem, good, cluster="chat-serve-b")
    assert "validated cluster 'chat-serve-b', not 'chat-serve-a'" in refused(other, staging, keys)
    old = signed(staging, pem, good, at=NOW - timedelta(hours=30))
    assert "stale: validated 30.0 h ago" in refused(old, staging, keys)
    # A failing node's rate raised by hand after signing: the signature no longer verifies.
    env = signed(staging, pem, {"srv-01": served(300.0), "srv-02": served(120.0, "fail")})
    st = json.loads(base64.b64decode(env["payload"]))
    for c in st["predicate"]["report"]["checks"]:
        if c["name"] == "srv-02/decode_tokens_per_s":
            c.update(status="pass", measured=320.0)
    st["predicate"]["passed"] = True
    body = json.dumps(st, sort_keys=True, separators=(",", ":")).encode()
    tampered = {**env, "payload": base64.b64encode(body).decode()}
    assert "does not verify" in refused(tampered, staging, keys)
