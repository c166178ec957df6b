"""The preflight report: waivers, findings located in the file, and the rule registry."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from preflight_bp import Unreadable, aws, load

from rackform.blueprint.loader import load_effective
from rackform.catalog.codes import CODES
from rackform.engine import compile_effective, prepare_all
from rackform.preflight.registry import RULES, codes, missing_rules
from rackform.preflight.report import findings, run

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "blueprints").glob("*.yaml"))

FULL_4_NODES_ETHERNET = aws(
    "g6e.48xlarge", count=4, fabric="ethernet", workload={"model_params_b": 13, "method": "full"}
)


def test_every_rule_has_a_unique_code_level_and_summary():
    assert len(codes()) == len(RULES)
    for r in RULES:
        assert r.level in ("error", "warning")
        assert r.summary and r.code.islower() and " " not in r.code
    # The schema checks waivers against the codes' data, never against the rules: every code
    # there has its rule and every rule's code is there.
    assert codes() == {c: v.level for c, v in CODES.items()}
    assert missing_rules() == []


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_the_rules_read_the_plan_and_never_the_blueprint(example):
    # The blueprint only locates findings in the file (report.run); every fact a rule compares
    # comes with the plan. Each example in each environment finds the same without it.
    for p in prepare_all(example):
        blind = dataclasses.replace(p.plan, effective=Unreadable())
        assert findings(blind) == [lf.finding for lf in p.report.findings]


def test_an_error_blocks_until_waived_and_the_reason_shows(tmp_path):
    report = run(load(tmp_path, FULL_4_NODES_ETHERNET))
    (f,) = [lf for lf in report.findings if lf.finding.code == "fabric-missing"]
    assert report.blocked and f.finding.blocks
    reason = "benchmarking TCP all-reduce on purpose for a paper"
    waived = {**FULL_4_NODES_ETHERNET, "waivers": [{"code": "fabric-missing", "reason": reason}]}
    report = run(load(tmp_path, waived))
    (f,) = [lf for lf in report.findings if lf.finding.code == "fabric-missing"]
    assert not report.blocked
    assert f.finding.waived == reason
    assert str(f).endswith(f"(waived: {reason})") and "waived error fabric-missing" in str(f)
    assert f.as_dict()["waived"] is True and f.as_dict()["waiver_reason"] == reason
    doc = report.as_dict()
    assert doc["cost"]["basis"] == "aws on-demand"
    assert {"level", "code", "path", "message", "fix"} <= set(doc["findings"][0])


BLUEPRINT = """\
name: loc-test
purpose: training
owner: team@example.com
target:
  type: aws
  region: us-east-1
  availability_zone: us-east-1a
  ssh_cidrs: [10.20.0.0/16]
node_groups:
  - name: gpu
    instance_type: g6e.48xlarge
    count: 4
network:
  fabric: ethernet
workload:
  model_params_b: 13
  method: full
environments:
  dev:
    network: {fabric: efa}
  qa:
    node_groups: [{name: gpu, count: 1}]
    network: {fabric: efa}
    workload: {global_batch: 4}
    waivers: [{code: fabric-unused, reason: qa checks the EFA install on one node}]
"""


def test_findings_point_at_the_line_that_set_the_value(tmp_path):
    path = tmp_path / "loc.yaml"
    path.write_text(BLUEPRINT)
    base = run(compile_effective(load_effective(path)))
    (f,) = [lf for lf in base.findings if lf.finding.code == "fabric-missing"]
    assert (f.file, f.line, f.col, f.env) == (str(path), 14, 11, "")
    assert str(f).startswith(f"{path}:14:11: network.fabric: error fabric-missing: ")
    # In dev the fabric is EFA (set on line 20) and fine; the memory, size and cost rules run.
    dev = run(compile_effective(load_effective(path, "dev")))
    assert not [lf for lf in dev.findings if lf.finding.code.startswith("fabric")]
    # A field nobody wrote is located at its nearest written ancestor: `storage` is absent,
    # so a finding about storage.checkpoint points at the top of the document.
    slow = aws(
        "g5.12xlarge", count=1, fabric="ethernet", workload={"model_params_b": 13, "method": "full"}
    )
    report = run(load(tmp_path, slow))
    (ck,) = [lf for lf in report.findings if lf.finding.code == "checkpoint-slow"]
    assert ck.finding.path == ("storage", "checkpoint")
    assert (ck.line, ck.col) == (1, 1)


def test_environment_override_locations_and_waivers(tmp_path):
    path = tmp_path / "loc.yaml"
    path.write_text(BLUEPRINT)
    qa = run(compile_effective(load_effective(path, "qa")))
    by = {lf.finding.code: lf for lf in qa.findings}
    assert "fabric-missing" not in by  # one node
    # 8 GPUs for a global batch of 4: located at qa's `count: 1`, not the base's `count: 4`.
    unused = by["nodes-unused"]
    assert (unused.line, unused.col, unused.env) == (22, 38, "qa")
    assert str(unused).startswith(f"{path}:22:38: node_groups[0].count [env qa]: warning ")
    # qa's own waiver applies to qa's own fabric line.
    fab = by["fabric-unused"]
    assert (fab.line, fab.col) == (23, 23)
    assert fab.finding.waived == "qa checks the EFA install on one node"
    assert not qa.blocked
