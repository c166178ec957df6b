"""Check records and the report: a pass always has a figure, a check that could not run is never
a pass, NaN stays visible, and the exit status follows the failures."""

from __future__ import annotations

import json
import math

import pytest

from validators import report
from validators.report import FAIL, NOT_RUN, PASS, Check, ReportError, compare, failed, not_run


def test_compare_statuses():
    assert compare("bw", 470.0, 460, "GB/s").status == PASS
    assert compare("bw", 450.0, 460, "GB/s").status == FAIL
    assert compare("n", 8, 8, "GPUs", "==").status == PASS
    assert compare("n", 7, 8, "GPUs", "==").status == FAIL
    assert compare("ecc", 0, 0, "errors", "<=").status == PASS
    assert compare("ecc", 2, 0, "errors", "<=").status == FAIL


def test_no_threshold_is_not_run_with_the_figure_kept():
    c = compare("bw", 12.5, None, "GB/s", no_threshold="no calibrated figure")
    assert c.status == NOT_RUN
    assert c.measured == 12.5
    assert "no calibrated figure" in c.detail


def test_nothing_measured_or_nan_fails_never_passes():
    assert compare("bw", None, 460, "GB/s").status == FAIL
    c = compare("loss", float("nan"), 0.2, "fraction")
    assert c.status == FAIL
    assert "nan" in c.detail


def test_rules_enforced_on_construction():
    with pytest.raises(ReportError, match="a pass needs a measured value"):
        Check("x", PASS, None, 1)
    with pytest.raises(ReportError, match="a pass needs a measured value"):
        Check("x", PASS, float("nan"), 1)
    with pytest.raises(ReportError, match="not-run needs a reason"):
        Check("x", NOT_RUN, None, None)
    with pytest.raises(ReportError, match="status 'ok'"):
        Check("x", "ok", 1, 1)
    with pytest.raises(ReportError, match="unknown comparison"):
        Check("x", FAIL, 1, 1, op="~")


def test_make_summary_and_exit_code():
    checks = [
        compare("a", 1, 1, "", "=="),
        not_run("b", "no GPU"),
        failed("c", "broke", measured=0, expected=1),
    ]
    doc = report.make(checks, job={"world_size": 2})
    assert doc["ok"] is False
    assert doc["summary"] == {PASS: 1, FAIL: 1, NOT_RUN: 1}
    assert [c["name"] for c in doc["checks"]] == ["a", "b", "c"]
    assert doc["job"] == {"world_size": 2}
    assert report.exit_code(doc) == 1
    assert report.exit_code(report.make(checks[:2])) == 0


def test_json_is_strict_and_round_trips():
    doc = report.make([failed("loss_drop", "NaN", measured=float("nan"), expected=0.2)])
    text = report.dumps(doc)

    def no_constants(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    back = json.loads(text, parse_constant=no_constants)
    assert back["checks"][0]["measured"] == "nan"
    (c,) = report.checks_of(back)
    assert c.status == FAIL and c.expected == 0.2


def test_checks_of_rejects_malformed_and_forged_passes():
    with pytest.raises(ReportError, match="no `checks` list"):
        report.checks_of({"check": []})
    with pytest.raises(ReportError, match="malformed check record"):
        report.checks_of({"checks": [{"name": "x"}]})
    forged = {"checks": [{"name": "x", "status": "pass", "measured": None, "expected": 1}]}
    with pytest.raises(ReportError, match="a pass needs a measured value"):
        report.checks_of(forged)


def test_table_shows_measured_next_to_expected():
    doc = report.make(
        [
            compare("allreduce_busbw", 471.234, 460.0, "GB/s", detail="4096 MiB"),
            not_run("mfu", "no GPU", unit="%"),
            failed("gpu_count", "missing", measured=7, expected=8, unit="GPUs", op="=="),
        ]
    )
    text = report.table(doc)
    lines = text.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "MEASURED", "EXPECTED", "UNIT", "DETAIL"]
    row = next(line for line in lines if line.startswith("allreduce_busbw"))
    assert row.split()[:6] == ["allreduce_busbw", "PASS", "471.2", ">=", "460", "GB/s"]
    assert "NOT-RUN" in next(line for line in lines if line.startswith("mfu"))
    assert "== 8" in next(line for line in lines if line.startswith("gpu_count"))
    assert lines[-1] == "smoke: FAILED: 1 passed, 1 failed, 1 not run"


def test_table_node_column_only_for_per_node_checks():
    one = report.table(report.make([compare("gpu_count", 8, 8, "GPUs", "==")]))
    assert "NODE" not in one
    two = report.table(
        report.make(
            [
                compare("gpu_count", 8, 8, "GPUs", "==", node="hgx-01"),
                compare("gpu_count", 7, 8, "GPUs", "==", node="hgx-02"),
            ]
        )
    )
    assert "NODE" in two.splitlines()[0]
    assert "hgx-02  FAIL" in two


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "-"), (True, "yes"), (0.5636, "0.5636"), (12345.6, "12,346"), (math.inf, "inf")],
)
def test_fmt(value, text):
    assert report.fmt(value) == text
