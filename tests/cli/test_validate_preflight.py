"""`rackform validate` runs the preflight rules: errors exit 2, warnings print and pass, and
`--json` carries the findings and each environment's cost."""

from __future__ import annotations

import json

from blueprint_helpers import AWS_TRAINING, EXAMPLES, FULL_ON_ETHERNET, rackform

FULL_ETHERNET = FULL_ON_ETHERNET
LORA_EFA = AWS_TRAINING.replace("count: 2", "count: 1") + (
    "workload: {model_params_b: 7, method: lora}\n"
)


def test_four_node_full_finetune_on_ethernet_exits_2(write):
    path = write(FULL_ETHERNET)
    r = rackform("validate", path)
    assert r.returncode == 2
    assert f"{path}:14:19: network.fabric: error fabric-missing: " in r.stderr
    assert "(fix: set network.fabric: infiniband or roce" in r.stderr
    assert f"{path}: preflight errors" in r.stdout
    assert "Traceback" not in r.stderr


def test_warnings_print_and_pass(write):
    path = write(LORA_EFA)
    r = rackform("validate", path)
    assert r.returncode == 0, r.stderr
    assert "warning fabric-unused: a single-node cluster with fabric efa" in r.stderr
    assert f"{path}: valid (default " in r.stdout


def test_waived_error_passes_and_shows_the_reason(write):
    reason = "a TCP baseline run, measured on purpose"
    path = write(FULL_ETHERNET + f"waivers: [{{code: fabric-missing, reason: '{reason}'}}]\n")
    r = rackform("validate", path)
    assert r.returncode == 0, r.stderr
    assert "waived error fabric-missing: " in r.stderr
    assert f"(waived: {reason})" in r.stderr


def test_json_findings_and_cost(write):
    path = write(FULL_ETHERNET)
    r = rackform("validate", "--json", path, EXAMPLES[0])
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert doc["valid"] is False
    assert [f["valid"] for f in doc["files"]] == [False, True]
    (f,) = [f for f in doc["findings"] if f["code"] == "fabric-missing"]
    assert {k: f[k] for k in ("level", "code", "path", "line", "col")} == {
        "level": "error",
        "code": "fabric-missing",
        "path": "network.fabric",
        "line": 14,
        "col": 19,
    }
    assert f["message"] and f["fix"] and f["waived"] is False
    env = doc["files"][0]["environments"][0]
    assert env["blocked"] is True
    assert env["cost"]["basis"] == "bare metal (amortized)"
    assert env["cost"]["usd_per_month"] is None  # no capex or power price in this blueprint


def test_cost_option_prints_the_table():
    r = rackform(
        "validate", "--cost", "--env", "prod", *[e for e in EXAMPLES if "aws-training" in e.name]
    )
    assert r.returncode == 0, r.stderr
    assert "[env prod]" in r.stdout
    assert "cost (aws on-demand, USD, 730 h/month):" in r.stdout
    assert "4 x p5.48xlarge on-demand" in r.stdout
