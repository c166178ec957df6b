"""The one verdict on a validation report (rackform.evidence.verdict), read by the Validate
stage and by promotion: reports built to fool it."""

from __future__ import annotations

from rackform.evidence.verdict import NOTHING_PASSED, verdict

PASS = {"name": "loss_drop", "status": "pass", "measured": 0.4, "expected": ">= 0.2"}
BUSBW = {"name": "allreduce_busbw", "status": "fail", "measured": 120, "expected": 460,
         "unit": "GB/s"}  # fmt: skip


def test_a_pass_needs_a_passed_check_and_no_failed_one():
    assert verdict({"checks": [PASS]}) == (True, "")
    assert verdict({"checks": [PASS, {"name": "mfu", "status": "skip"}]}) == (True, "")


def test_nothing_that_passed_proves_nothing():
    for report in (
        {},
        {"checks": None},
        {"checks": []},
        {"checks": [{"name": "mfu", "status": "skip"}, {"name": "busbw", "status": "not_run"}]},
        {"checks": [{"name": "loss_drop", "status": "PASS"}]},  # not the word the reports write
        {"checks": [{"name": "loss_drop"}]},
    ):
        assert verdict(report) == (False, NOTHING_PASSED), report


def test_one_failed_check_among_passes_fails_naming_what_it_measured():
    ok, why = verdict({"checks": [PASS, BUSBW, PASS]})
    assert not ok
    assert why == "allreduce_busbw: measured 120 GB/s, expected 460 GB/s"


def test_every_failed_check_is_named_in_one_line():
    node = {"name": "node_reports", "status": "fail", "measured": 0, "expected": 2}
    ok, why = verdict({"checks": [BUSBW, PASS, node]})
    assert not ok and "\n" not in why
    assert why.split("; ") == [
        "allreduce_busbw: measured 120 GB/s, expected 460 GB/s",
        "node_reports: measured 0, expected 2",
    ]


def test_a_failure_on_every_node_of_a_big_cluster_stays_one_short_line():
    nodes = [{**BUSBW, "name": f"gpu-{i:03d}/allreduce_busbw"} for i in range(300)]
    ok, why = verdict({"checks": [PASS, *nodes]})
    assert not ok and "\n" not in why
    assert why.startswith("gpu-000/allreduce_busbw: measured 120 GB/s, expected 460 GB/s; ")
    assert why.count("measured") == 5 and why.endswith("; and 295 more failed check(s)")
