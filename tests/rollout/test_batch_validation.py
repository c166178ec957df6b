"""A batch's re-validation can only pass on evidence: the smoke_train role skips its job on a
run over part of the cluster and where the same job's report exists, so the variables a batch
validation passes must make the role run the job over the batch (judged on the role's own
expressions), and the verdict needs a passing report from every node of the batch."""

from __future__ import annotations

import json
from pathlib import Path

from role_vars import render

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.model import thaw
from rackform.rollout.ansible import batch_job, judge_reports

ROOT = Path(__file__).resolve().parents[2]
ALL = ["hgx-01", "hgx-02", "hgx-03", "hgx-04"]


def plan_vars() -> dict:
    plan = compile_effective(load_effective(ROOT / "blueprints" / "baremetal-slurm.yaml"))
    return {**plan.group_vars, "smoke_train_cluster_hosts": ALL}


def test_a_limited_run_alone_would_skip_the_job():
    """The hole this closes: --limit to the batch, and the role runs no job (rc 0)."""
    assert render("smoke_train", "_smoke_train_partial", plan_vars(), ["hgx-02"]) is True


def test_the_batch_job_runs_over_the_batch_outside_slurm():
    v = {**plan_vars(), **batch_job(["hgx-02", "hgx-03"])}
    assert render("smoke_train", "_smoke_train_partial", v, ["hgx-02", "hgx-03"]) is False
    assert v["smoke_train_slurm"] is False and v["smoke_train_force"] is True
    assert v["smoke_train_hosts_file"] is False  # /etc/hosts keeps every node of the cluster
    assert render("smoke_train", "_smoke_train_nodes", v, ["hgx-03", "hgx-02"]) == [
        "hgx-02",
        "hgx-03",
    ]


def report(path: Path, checks: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"checks": checks}))


PASS = [{"name": "loss_decreases", "status": "pass"}]


def test_every_node_needs_a_passing_report(tmp_path):
    report(tmp_path / "0123abcd" / "hgx-02.json", PASS)
    report(tmp_path / "0123abcd" / "hgx-03.json", PASS)
    assert judge_reports(tmp_path, ["hgx-02", "hgx-03"]).ok


def test_a_node_without_a_report_fails_the_batch(tmp_path):
    report(tmp_path / "0123abcd" / "hgx-02.json", PASS)
    r = judge_reports(tmp_path, ["hgx-02", "hgx-03"])
    assert not r.ok and r.why == "hgx-03: no report (the smoke job did not run there)"


def test_a_failed_or_empty_or_cut_report_fails_the_batch(tmp_path):
    report(tmp_path / "r" / "hgx-02.json", [
        {"name": "allreduce_busbw", "status": "fail", "measured": 3.1, "expected": ">= 40", "unit": "GB/s"}
    ])  # fmt: skip
    report(tmp_path / "r" / "hgx-03.json", [{"name": "gpu_count", "status": "skip"}])
    (tmp_path / "r" / "hgx-04.json").write_text('{"checks": [')
    r = judge_reports(tmp_path, ["hgx-02", "hgx-03", "hgx-04"])
    assert not r.ok
    assert "hgx-02: allreduce_busbw: measured 3.1 GB/s, expected >= 40 GB/s" in r.why
    assert "hgx-03: no check passed (none ran)" in r.why
    assert "hgx-04: its report" in r.why and "cannot be read" in r.why


def test_a_batch_applies_only_the_roles_the_change_touches():
    from rackform.rollout.ansible import AnsibleNodes

    nodes = AnsibleNodes({}, {}, roles=["nccl_rdma", "nvidia_driver"])
    assert nodes._tags() == ["nccl_rdma", "nvidia_driver"]
    nodes.roles = ["host_bootstrap"]  # runs before every role: the whole site then
    assert nodes._tags() == []


def test_a_one_node_batch_skips_its_job_when_a_host_check_fails_and_a_larger_one_does_not():
    """The launcher ends a gated run at a failed host check; the role asks for the gate only
    where the run is one node (a node of a larger batch that skipped its part would leave its
    peers waiting at the rendezvous), and a configure or validation run never asks for it."""
    # What the play has registered and gathered by then: the validators archive, the facts.
    facts = {n: {"ansible_facts": {"ib0": {"ipv4": {"address": f"10.0.0.{i}"}}}}
             for i, n in enumerate(ALL, 1)}  # fmt: skip
    seen = {"_smoke_train_archive_stat": {"stat": {"checksum": "0" * 40}}, "hostvars": facts}

    def argv(variables: dict, hosts: list[str]) -> list[str]:
        every = {**thaw(plan_vars()), **variables, **seen}  # the plan's tuples as Ansible's lists
        return render("smoke_train", "_smoke_train_argv", every, hosts)

    gate = "--skip-job-on-host-failure"
    assert gate in argv(batch_job(["hgx-02"]), ["hgx-02"])
    assert gate not in argv(batch_job(["hgx-02", "hgx-03"]), ["hgx-02", "hgx-03"])
    assert gate not in argv({}, ["hgx-02"])  # a configure or a validation: never gated
