"""The validate stage's work: the nodes' reports merged into one, and the stage contract."""

from __future__ import annotations

from rackform.stack.stages import VALIDATE_WORK, resolve
from rackform.validation.cluster import merge_reports, validate_cluster


def report(*statuses):
    return {
        "checks": [
            {"name": f"c{i}", "status": s, "measured": 1, "expected": 1, "unit": ""}
            for i, s in enumerate(statuses)
        ]
    }


def test_every_nodes_checks_are_kept_and_named_by_host():
    merged = merge_reports(["n1", "n2"], {"n1": report("pass", "fail"), "n2": report("pass")}, 2)
    by_name = {c["name"]: c["status"] for c in merged["checks"]}
    assert by_name == {"n1/c0": "pass", "n1/c1": "fail", "n2/c0": "pass", "node_reports": "pass"}
    assert merged["ansible_rc"] == 2


def test_a_node_without_a_report_fails():
    merged = merge_reports(["n1", "n2"], {"n1": report("pass")}, 2)
    nodes = next(c for c in merged["checks"] if c["name"] == "node_reports")
    assert (nodes["status"], nodes["measured"], nodes["expected"]) == ("fail", 1, 2)
    assert "no report from n2" in nodes["detail"]


def test_no_nodes_proves_nothing():
    merged = merge_reports([], {}, 0)
    assert [c["status"] for c in merged["checks"]] == ["fail"]


def test_the_stage_resolves_to_this_function():
    assert resolve(VALIDATE_WORK, "validate") is validate_cluster
