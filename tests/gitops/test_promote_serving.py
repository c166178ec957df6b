"""`rackform promote` of an inference blueprint in a real git repository: on the serving smoke
job's signed evidence (made by the code the Validate stage runs, saved as `--evidence` takes it),
with what the job measured in the record; a training job's evidence leaves the repository as it
was."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from gitrepo import git, make_remote
from promotion_world import HOSTS, NODE, SERVE, keypair, keys_file, served

from rackform.acceptance.cluster import merge_reports
from rackform.engine import prepare
from rackform.evidence.pin import pin_of
from rackform.evidence.signing import SIGNING_ENV
from rackform.evidence.statement import attest
from rackform.gitops import promote as promotion

BP = "blueprints/chat-serve-a.yaml"
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


@pytest.fixture
def world(tmp_path):
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    pem, key = keypair(secrets, "staging")
    files = {BP: SERVE, "promotion-keys.yaml": keys_file([("staging", key, ["staging"])])}
    _, repo = make_remote(tmp_path, files)
    staging = prepare(repo / BP, "staging").plan

    def evidence(reports: dict) -> object:
        about = {"stack": staging.stack, "cluster": staging.name,
                 "environment": "staging", "pin": pin_of(staging)}  # fmt: skip
        env = attest(merge_reports(list(HOSTS), reports, 0), about, list(HOSTS), now=NOW,
                     environ={SIGNING_ENV: str(pem)})  # fmt: skip
        saved = tmp_path / "evidence.json"
        saved.write_text(json.dumps(env))
        return saved

    return repo, evidence


def test_an_inference_blueprint_is_promoted_on_its_serving_smoke_job(world):
    repo, evidence = world
    ok = evidence({"srv-01": served(300.0, cost=0.99), "srv-02": served(280.0, cost=1.05)})
    done = promotion.promote(repo / BP, "staging", "prod", evidence=ok, age=timedelta(hours=1),
                             now=NOW + timedelta(minutes=5))  # fmt: skip
    assert done.changed and done.serving["decode_tokens_per_s"] == 290.0
    record = json.loads(done.path.read_text())
    assert record["serving"] == {"decode_tokens_per_s": 290.0,
                                 "cost_per_million_output_tokens": 1.02,
                                 "cost_from": "the serving smoke job's figure", "nodes": 2}  # fmt: skip


def test_a_training_jobs_evidence_is_refused_and_nothing_is_written(world):
    repo, evidence = world
    before = git(repo, "status", "--porcelain")
    with pytest.raises(promotion.Refused, match="no serving smoke job in the report"):
        promotion.promote(repo / BP, "staging", "prod", evidence=evidence({h: NODE for h in HOSTS}),
                          age=timedelta(hours=1), now=NOW)  # fmt: skip
    assert git(repo, "status", "--porcelain") == before
    assert not (repo / "promotions").exists()
