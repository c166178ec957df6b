"""The AWS default-quota rule over a repository's stacks: every environment of every blueprint in
the directory counts, by region (or zone for NAT gateways), with the figures from the catalog;
and the catalog's count of what one stack uses is what the program creates."""

from __future__ import annotations

from collections import Counter

import pytest
from planhelp import AWS_INFERENCE, AWS_TRAINING, BARE_METAL, plan, variant, write_blueprint

from rackform.blueprint.repository import siblings
from rackform.blueprint.targets.aws.catalog.quotas import load_quotas
from rackform.engine import prepare_all, prepare_many
from rackform.preflight.targets.aws.quotas import repository_stacks

CODE = "aws-default-quota"


def train(name: str, envs: dict, **changes) -> dict:
    """A training cluster beside the serving one (us-west-2), in zone a."""
    where = {"target.region": "us-west-2", "target.availability_zone": "us-west-2a"}
    return variant({**AWS_TRAINING, "name": name, "environments": envs}, **{**where, **changes})


def serve(name: str, envs: dict, **changes) -> dict:
    return variant({**AWS_INFERENCE, "name": name, "environments": envs}, **changes)


def quota_findings(prepared) -> dict[str, list]:
    """env -> this rule's findings, for one file's prepared environments."""
    return {
        p.plan.environment: [lf for lf in p.report.findings if lf.finding.code == CODE]
        for p in prepared
    }


@pytest.fixture
def repo(tmp_path):
    """Like this repository's blueprints/: a hyphenated training cluster in four environments
    (prod in another region), a serving cluster in three, a bare-metal one, and files that are
    not blueprints."""
    us_east = {"target": {"region": "us-east-1", "availability_zone": "us-east-1a"}}
    write_blueprint(
        tmp_path, train("llm-train-a", {"dev": {}, "staging": {}, "prod": us_east}), "train.yaml"
    )
    write_blueprint(tmp_path, serve("llm-serve-a", {"dev": {}, "prod": {}}), "serve.yaml")
    write_blueprint(tmp_path, BARE_METAL, "metal.yaml")
    (tmp_path / "notes.yml").write_text("just: a note\n")
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    return tmp_path


def test_every_environment_of_every_aws_blueprint_is_a_stack(repo):
    stacks = {s.name: (s.region, s.zone) for s in repository_stacks(siblings(repo))}
    assert stacks == {
        "llm-train-a-default": ("us-west-2", "us-west-2a"),
        "llm-train-a-dev": ("us-west-2", "us-west-2a"),
        "llm-train-a-staging": ("us-west-2", "us-west-2a"),
        "llm-train-a-prod": ("us-east-1", "us-east-1a"),
        "llm-serve-a-default": ("us-west-2", "us-west-2b"),
        "llm-serve-a-dev": ("us-west-2", "us-west-2b"),
        "llm-serve-a-prod": ("us-west-2", "us-west-2b"),
    }


def test_six_stacks_in_one_region_warn_of_vpcs_and_elastic_ips_not_of_nat_per_zone(repo):
    by_env = quota_findings(prepare_all(repo / "serve.yaml"))
    for env, found in by_env.items():
        messages = [lf.finding.message for lf in found]
        assert len(messages) == 2, (env, messages)
        vpcs, eips = messages
        assert "need 6 of AWS's VPCs per Region, whose default quota is 5" in vpcs
        assert "need 6 of AWS's Elastic IP addresses per Region" in eips
        assert (
            "declare in us-west-2 (llm-serve-a-default, llm-serve-a-dev, llm-serve-a-prod, "
            "llm-train-a-default, llm-train-a-dev, llm-train-a-staging)"
        ) in vpcs
        assert "amazon-vpc-limits.html" in vpcs
        assert all(
            lf.finding.level == "warning" and lf.finding.path == ("target", "region")
            for lf in found
        )
    # Located at the field that put the stack there: the base blueprint's region line.
    (lf, _) = by_env["default"]
    assert (lf.file.endswith("serve.yaml"), lf.line) == (True, 6)


def test_nat_gateways_count_per_zone(tmp_path):
    # Six stacks in one zone (three files of two environments): six NAT gateways, over 5.
    for i in range(3):
        write_blueprint(tmp_path, train(f"c-{i}", {"dev": {}}), f"c{i}.yaml")
    found = quota_findings(prepare_all(tmp_path / "c0.yaml"))["dev"]
    nat = [lf.finding for lf in found if "NAT gateways" in lf.finding.message]
    assert len(nat) == 1 and nat[0].path == ("target", "availability_zone")
    assert "declare in us-west-2a (c-0-default, c-0-dev, c-1-default" in nat[0].message
    # Move one file's stacks to another zone of the region: 4 in the zone, no NAT warning, but
    # the region's VPCs (6) still warn.
    write_blueprint(
        tmp_path, train("c-2", {"dev": {}}, **{"target.availability_zone": "us-west-2c"}), "c2.yaml"
    )
    found = quota_findings(prepare_all(tmp_path / "c0.yaml"))["dev"]
    assert not [lf for lf in found if "NAT gateways" in lf.finding.message]
    assert any("need 6 of AWS's VPCs per Region" in lf.finding.message for lf in found)


def test_within_the_quota_or_another_region_or_target_nothing_is_said(repo, tmp_path):
    alone = tmp_path / "alone"
    alone.mkdir()
    write_blueprint(alone, train("one-cluster", {"dev": {}, "prod": {}}), "one.yaml")
    assert not any(quota_findings(prepare_all(alone / "one.yaml")).values())
    # llm-train-a's prod is alone in us-east-1; the other six share us-west-2. A bare-metal
    # blueprint beside them is never warned.
    by_env = quota_findings(prepare_all(repo / "train.yaml"))
    assert by_env["prod"] == [] and all(by_env[e] for e in ("default", "dev", "staging"))
    assert not any(quota_findings(prepare_all(repo / "metal.yaml")).values())


def test_several_files_at_once_count_the_same_stacks_and_a_waiver_accepts_it(repo):
    by_file = dict(prepare_many([repo / "train.yaml", repo / "serve.yaml"]))
    counts = Counter(
        lf.finding.message.split(" need ")[1].split(",")[0]
        for ps in by_file.values()
        for p in ps
        for lf in p.report.findings
        if lf.finding.code == CODE
    )
    # Each of the 6 stacks in us-west-2 is told about the VPCs and the Elastic IPs; llm-train-a's
    # prod, alone in us-east-1, about nothing.
    assert counts == {
        "6 of AWS's VPCs per Region": 6,
        "6 of AWS's Elastic IP addresses per Region": 6,
    }
    waived = serve("llm-serve-a", {"dev": {}, "prod": {}})
    waived["waivers"] = [{"code": CODE, "reason": "quota raised to 20 VPCs in case 1234"}]
    write_blueprint(repo, waived, "serve.yaml")
    found = quota_findings(prepare_all(repo / "serve.yaml"))["prod"]
    assert len(found) == 2
    assert found and all(
        lf.finding.waived == "quota raised to 20 VPCs in case 1234" for lf in found
    )


def test_what_one_stack_uses_is_what_the_program_creates(tmp_path):
    for purpose, doc in (("training", AWS_TRAINING), ("inference", AWS_INFERENCE)):
        types = Counter(r.type for r in plan(tmp_path, doc))
        for quota in load_quotas():
            assert types[quota.resource] == quota.used_by(purpose), (purpose, quota.key)
            assert quota.default.source.url.startswith("https://docs.aws.amazon.com/")


def test_the_rule_counts_what_the_plan_carries_and_reads_no_file(repo):
    # The engine reads the blueprints beside this one when it compiles; preflight then reads
    # the plan alone: the files gone by then change nothing, and a plan compiled without its
    # siblings (compile itself reads no file) counts only its own stack.
    from rackform.blueprint.targets.schemas import SCHEMAS
    from rackform.engine import compile_effective
    from rackform.plan.compile import compile_plan
    from rackform.plan.targets.compilers import COMPILERS
    from rackform.preflight.report import run

    (effective,) = [e for e in siblings(repo) if e.environment == "dev" and "serve" in e.source]
    plan = compile_effective(effective)
    assert {s.name for s in repository_stacks(plan.siblings)} >= {"llm-train-a-staging"}
    for f in repo.glob("*.yaml"):
        f.unlink()
    assert [lf.finding.code for lf in run(plan).findings].count(CODE) == 2
    alone = compile_plan(effective, SCHEMAS["aws"], COMPILERS["aws"], None)
    assert CODE not in [lf.finding.code for lf in run(alone).findings]
