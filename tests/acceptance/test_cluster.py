"""The validate stage's work: the nodes' reports merged into one, and the stage contract."""

from __future__ import annotations

from rackform.acceptance.cluster import merge_reports, validate_cluster
from rackform.stage_work import VALIDATE


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


def test_the_stage_runs_this_function():
    assert VALIDATE["work"] is validate_cluster


def slurm(job_id="812", nodes=2, node="n1"):
    return {"job_id": job_id, "partition": "main", "nodelist": "n[1-2]", "nodes": nodes,
            "node": node, "gpus_per_node": 8, "job_name": "s", "restart_count": 0}  # fmt: skip


def test_a_smoke_job_through_slurm_proves_one_job_held_every_node():
    reports = {n: {**report("pass"), "slurm": slurm(node=n)} for n in ("n1", "n2")}
    merged = merge_reports(["n1", "n2"], reports, 0)
    gang = next(c for c in merged["checks"] if c["name"] == "slurm_allocation")
    assert (gang["status"], gang["measured"], gang["expected"]) == ("pass", 2, 2)
    assert gang["detail"] == "every node at once: Slurm job 812 in main: n[1-2], 8 GPUs per node"
    assert merged["slurm"] == {"job_id": "812", "partition": "main", "nodelist": "n[1-2]",
                               "nodes": 2, "gpus_per_node": 8}  # fmt: skip
    # Without Slurm there is no such check.
    assert "slurm" not in merge_reports(["n1"], {"n1": report("pass")}, 0)


def test_nodes_in_different_jobs_or_outside_slurm_fail_the_allocation():
    split = {"n1": {**report("pass"), "slurm": slurm("812")},
             "n2": {**report("pass"), "slurm": slurm("813", node="n2")}}  # fmt: skip
    gang = merge_reports(["n1", "n2"], split, 0)["checks"][-1]
    assert gang["status"] == "fail" and "n1 in 812, n2 in 813" in gang["detail"]
    half = {"n1": {**report("pass"), "slurm": slurm()}, "n2": report("pass")}
    gang = merge_reports(["n1", "n2"], half, 0)["checks"][-1]
    assert gang["status"] == "fail" and gang["detail"].startswith("n2 ran outside Slurm job 812")
